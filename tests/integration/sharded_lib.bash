# Shared helpers of the sharded-publish integration tests (publish_sharded*.sh; sourced after
# rollout_lib.bash, not a test itself): the ranks' files per step, a rank's publisher, and checks
# of what the agents hold.
# A test that defines rank_flags R gets its output added to rank R's publish (certificate
# mode's --ca/--cert/--key).

world=4
# make_parts STEPS: $work/part/R/S/model.safetensors for rank R and step S, ~1.2 MiB each, with
# tensors of their own names; each step changes about 2% of the bytes of every rank's part.
make_parts() {
  python3 - "$work/part" "$world" "$1" <<'EOF'
import json, os, random, struct, sys
root, world, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for r in range(world):
    rng = random.Random(r)
    data = bytearray(rng.randbytes(256 * 1024 * 4 + 4096 * (r + 1)))
    for s in range(1, steps + 1):
        if s > 1:
            for _ in range(len(data) // 50):
                data[rng.randrange(len(data))] = rng.randrange(256)
        w = 256 * 1024 * 4
        header = {"layers.%d.w" % r: {"dtype": "F32", "shape": [256, 1024], "data_offsets": [0, w]},
                  "layers.%d.b" % r: {"dtype": "U8", "shape": [len(data) - w],
                                      "data_offsets": [w, len(data)]}}
        text = json.dumps(header).encode()
        text += b" " * (-len(text) % 8)
        d = os.path.join(root, str(r), str(s))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "model.safetensors"), "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text + bytes(data))
EOF
}

# rank R S [FLAGS...]: rank R publishes step S (background, seeding until stopped).
rank() {
  local r="$1" s="$2"
  shift 2
  kill_process "rank$r"
  local own=()
  if declare -F rank_flags >/dev/null; then read -r -a own <<<"$(rank_flags "$r")"; fi
  "$wc" publish --coordinator "$coord" --store "$work/rank$r" --channel "$channel" \
    --dir "$work/part/$r/$s" --rank "$r" --world "$world" --writer-id trainer \
    --chunk-size 256KiB --until never --secret-file "$work/secret" "${own[@]}" "$@" \
    >>"$work/rank$r.out" 2>>"$work/rank$r.log" &
  pids[rank$r]=$!
}

base_of() {  # base_of V: the base version of V (0: full; empty: not logged)
  status_json | python3 -c '
import json, sys
for ch in json.load(sys.stdin).get("channels", []):
    for e in ch.get("versions", []):
        if int(e["version"]) == int(sys.argv[1]):
            print(e.get("base_version", 0))' "$1"
}
logged() { [[ "$(decision_of "$1")" != UNKNOWN ]]; }

# same_parts V S NAME: agent NAME's version V holds each rank's step-S file byte for byte.
same_parts() {
  local v="$1" s="$2" name="$3" r dir
  for ((r = 0; r < world; r++)); do
    dir="$work/$name/$channel/versions/$v/$(printf 'rank-%05d-of-%05d' "$r" "$world")"
    cmp -s "$work/part/$r/$s/model.safetensors" "$dir/model.safetensors" || return 1
  done
}

# publish_step S BASE: every rank publishes step S as version S; both agents commit it holding
# every rank's files byte for byte, and its base is BASE (0: a full version).
publish_step() {
  local s="$1" base="$2" r
  for ((r = 0; r < world; r++)); do rank "$r" "$s"; done
  wait_for 60 all_current "$s" a1 a2 || fail "the agents did not commit v$s"
  same_parts "$s" "$s" a1 && same_parts "$s" "$s" a2 || fail "an agent's v$s differs from the ranks' files"
  [[ "$(base_of "$s")" == "$base" ]] || fail "v$s has base $(base_of "$s"), not $base"
}
