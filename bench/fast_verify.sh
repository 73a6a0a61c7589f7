#!/usr/bin/env bash
# Fast verify: what an agent spends applying one RL delta step with
# `--verify-result fast` (each rebuilt chunk checked against the signed manifest's XXH3-128,
# after the payload matched its SHA-256) against `--verify-result sha256` (the rebuilt chunk
# hashed with SHA-256), in one run, next to the references that bound them:
#   1. real processes on 127.0.0.1 (one coordinator, one publisher, one agent; the same binary):
#      the agent receives a full version (synth bf16, default 1 GiB), then one training step of it
#      (~1% of elements changed) as a delta; the figure is the agent's CPU seconds (user + system,
#      /proc/PID/stat) and wall seconds from just before `weightcast publish` of the delta to the
#      agent's commit. Rounds alternate the two settings; /metrics says which check ran.
#   2. bench_agent_apply (in process, same size): payload check + decode + staged writes with
#      either check, and one SHA-256 and one XXH3-128 pass over the same bytes.
#   3. `openssl speed -evp sha256` (8 KiB blocks): SHA-256 throughput of this machine's OpenSSL.
#
#   bash bench/fast_verify.sh BUILD_DIR [size=1GiB] [chunk=1MiB] [rounds=2]
#
# Last line: one JSON object.
set -euo pipefail

build=${1:?usage: fast_verify.sh BUILD_DIR [size] [chunk] [rounds]}
size=${2:-1GiB}
chunk=${3:-1MiB}
rounds=${4:-2}
wc="$build/src/cli/weightcast"
apply="$build/bench/bench_agent_apply"
for b in "$wc" "$apply"; do [[ -x $b ]] || { echo "no $b (build it first)" >&2; exit 1; }; done

work="$(mktemp -d /dev/shm/wc-fast-verify.XXXXXX)"
declare -A pids=()
cleanup() {
  local n
  for n in "${!pids[@]}"; do kill -9 "${pids[$n]}" 2>/dev/null || true; done
  for n in "${!pids[@]}"; do wait "${pids[$n]}" 2>/dev/null || true; done
  if [[ "${KEEP_WORK:-}" == 1 ]]; then echo "kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
now() { date +%s.%N; }

head -c 48 /dev/urandom | base64 >"$work/secret"
"$wc" synth model -o "$work/data/step-0000" --size "$size" --seed 11 >/dev/null
"$wc" synth steps --from "$work/data/step-0000" -o "$work/data" --steps 1 --lr 5e-7 --seed 11 \
  >/dev/null
bytes=$(du -sb "$work/data/step-0001" | cut -f1)

is_current() { [[ "$(basename "$(readlink "$1/policy/current" 2>/dev/null)")" == "$2" ]]; }

# one_round MODE R: sets cpu_s, wall_s and checks (the agent's delta chunk counters).
one_round() {
  local mode="$1" r="$2" d="$work/r$2" coord before after t0 t1 url
  mkdir -p "$d"
  "$wc" coordinator --listen 127.0.0.1:0 --state-dir "$d/coord" --address-file "$d/coord.addr" \
    --secret-file "$work/secret" 2>"$d/coord.log" &
  pids[coord]=$!
  wait_for 20 test -s "$d/coord.addr" || { echo "coordinator did not start" >&2; exit 1; }
  coord="$(cat "$d/coord.addr")"
  "$wc" agent --coordinator "$coord" --store "$d/agent" --channel policy --node-id 101 \
    --secret-file "$work/secret" --verify-result "$mode" --metrics 127.0.0.1:0 \
    2>"$d/agent.log" &
  pids[agent]=$!
  local v dir
  for v in 1 2; do
    dir="$work/data/step-000$((v - 1))"
    if [[ $v == 2 ]]; then
      before=$(cpu_ticks "${pids[agent]}")
      t0=$(now)
    fi
    "$wc" publish --coordinator "$coord" --store "$d/pub" --channel policy --dir "$dir" \
      --chunk-size "$chunk" --until complete --node-id 1 --secret-file "$work/secret" \
      >"$d/pub$v.out" 2>"$d/pub$v.log" &
    pids[pub]=$!
    wait_for 300 is_current "$d/agent" "$v" ||
      { echo "agent did not commit v$v" >&2; tail "$d/agent.log" >&2; exit 1; }
    if [[ $v == 2 ]]; then
      after=$(cpu_ticks "${pids[agent]}")
      t1=$(now)
    fi
    wait "${pids[pub]}" || true
    unset "pids[pub]"
  done
  cmp -s "$work/data/step-0001/model.safetensors" "$d/agent/policy/versions/2/model.safetensors" ||
    { echo "round $r: the agent's v2 differs from the published files" >&2; exit 1; }
  url="$(grep -o 'http://[0-9.:]*/metrics' "$d/agent.log" | head -1)"
  checks="$(curl -sf "$url" | awk '/^weightcast_agent_delta_chunks_total\{/ {
    match($0, /check="[a-z0-9]*"/); printf "%s=%s ", substr($0, RSTART + 7, RLENGTH - 8), $NF }')"
  local used
  used="$(sed -n "s/.*$mode=\([0-9]*\).*/\1/p" <<<"$checks")"
  [[ -n $used ]] && ((used > 0)) ||
    { echo "round $r: the agent ran no $mode check ($checks)" >&2; exit 1; }
  grep -q 'fetching whole chunks from now on' "$d/agent.log" &&
    { echo "round $r: the agent fell back to whole chunks" >&2; exit 1; }
  kill "${pids[agent]}" "${pids[coord]}"
  wait "${pids[agent]}" "${pids[coord]}" 2>/dev/null || true
  unset "pids[agent]" "pids[coord]"
  rm -rf "$d"
  cpu_s=$(python3 -c "print(($after - $before) / $hz)")
  wall_s=$(python3 -c "print(round($t1 - $t0, 3))")
}

fast_cpu=() sha_cpu=() fast_wall=() sha_wall=()
for ((r = 0; r < rounds; r++)); do
  one_round sha256 "s$r"
  sha_cpu+=("$cpu_s") sha_wall+=("$wall_s")
  echo "round $r sha256: agent CPU $cpu_s s, wall $wall_s s ($checks)" >&2
  one_round fast "f$r"
  fast_cpu+=("$cpu_s") fast_wall+=("$wall_s")
  echo "round $r fast:   agent CPU $cpu_s s, wall $wall_s s ($checks)" >&2
done

mib=$(python3 -c "import sys; s=sys.argv[1].upper(); m={'KIB':1/1024,'MIB':1,'GIB':1024}; \
print(int(float(s[:-3]) * m[s[-3:]]))" "$size")
chunk_kib=$(python3 -c "import sys; s=sys.argv[1].upper(); m={'KIB':1,'MIB':1024}; \
print(int(float(s[:-3]) * m[s[-3:]]))" "$chunk")
"$apply" --mib "$mib" --chunk-kib "$chunk_kib" --rounds 3 --dir /dev/shm \
  --modes verify_sha256,verify_fast,sha256_pass,xxh3_pass >"$work/apply.out"
cat "$work/apply.out" >&2
openssl speed -evp sha256 -bytes 8192 -seconds 2 2>/dev/null >"$work/openssl.out" || true
grep -i '^sha256' "$work/openssl.out" >&2 || true

python3 - "$size" "$chunk" "$bytes" "${sha_cpu[*]}" "${fast_cpu[*]}" "${sha_wall[*]}" \
  "${fast_wall[*]}" "$work/apply.out" "$work/openssl.out" <<'PY'
import json, re, statistics, sys
size, chunk, nbytes = sys.argv[1], sys.argv[2], int(sys.argv[3])
sha_cpu, fast_cpu, sha_wall, fast_wall = ([float(x) for x in a.split()] for a in sys.argv[4:8])
apply = json.loads(open(sys.argv[8]).read().strip().splitlines()[-1])
openssl = None
for line in open(sys.argv[9]):
    if line.lower().startswith("sha256"):
        # "sha256  <rate>k" in 1000s of bytes per second for the one block size asked.
        m = re.findall(r"([0-9.]+)k", line)
        if m:
            openssl = round(float(m[-1]) * 1000 / 1e9, 2)
ms, mf = statistics.median(sha_cpu), statistics.median(fast_cpu)
ws, wf = statistics.median(sha_wall), statistics.median(fast_wall)
print(f"agent CPU per {size} delta step (chunks {chunk}): sha256 {ms:.3f} s, fast {mf:.3f} s, "
      f"sha256/fast {ms / mf:.2f}; wall sha256 {ws:.2f} s, fast {wf:.2f} s; in process: "
      f"verify_sha256 {apply['verify_sha256_cpu_s']} s, verify_fast {apply['verify_fast_cpu_s']} s"
      f"; SHA-256 {apply['sha256_pass_gb_per_cpu_s']} GB/s, XXH3-128 "
      f"{apply['xxh3_pass_gb_per_cpu_s']} GB/s, openssl speed sha256 {openssl} GB/s")
print(json.dumps({"bench": "fast_verify", "size": size, "chunk": chunk, "model_bytes": nbytes,
                  "agent_sha256_cpu_s": sha_cpu, "agent_fast_cpu_s": fast_cpu,
                  "agent_sha256_wall_s": sha_wall, "agent_fast_wall_s": fast_wall,
                  "agent_median_sha256_cpu_s": ms, "agent_median_fast_cpu_s": mf,
                  "agent_sha256_over_fast": round(ms / mf, 2),
                  "apply_verify_sha256_cpu_s": apply["verify_sha256_cpu_s"],
                  "apply_verify_fast_cpu_s": apply["verify_fast_cpu_s"],
                  "apply_sha256_over_fast": apply.get("sha256_over_fast"),
                  "sha256_pass_gb_per_cpu_s": apply["sha256_pass_gb_per_cpu_s"],
                  "xxh3_pass_gb_per_cpu_s": apply["xxh3_pass_gb_per_cpu_s"],
                  "openssl_speed_sha256_8k_gb_per_s": openssl}))
PY
