#!/usr/bin/env bash
# Peak memory of `weightcast diff` is set by its buffer pool, not by the model size: encodes an
# RL-like step of a SMALL and a LARGE synth model and samples the process's anonymous resident
# memory (RssAnon: heap and buffers; the mmap'd model files are page cache, not counted) every
# 20 ms. The ratio peak(LARGE)/peak(SMALL) should stay near 1 while LARGE/SMALL model bytes is 8.
#   bench/diff_memory.sh WEIGHTCAST [SMALL=512MiB] [LARGE=4GiB]
set -euo pipefail
wc="$(realpath "$1")"; small="${2:-512MiB}"; large="${3:-4GiB}"
work="$(mktemp -d "${TMPDIR:-/tmp}/wc-diffmem.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# peak_anon_kib CMD...: runs CMD, prints the highest RssAnon seen (KiB).
peak_anon_kib() {
  "$@" >"$work/out.log" 2>&1 &
  local pid=$! peak=0 v
  while kill -0 "$pid" 2>/dev/null; do
    v=$(awk '/^RssAnon:/{print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
    [ -n "$v" ] && [ "$v" -gt "$peak" ] && peak=$v
    sleep 0.02
  done
  wait "$pid"
  echo "$peak"
}

declare -A bytes peak
for size in "$small" "$large"; do
  "$wc" synth model -o "$work/$size/m0" --size "$size" --seed 9 >/dev/null
  "$wc" synth steps --from "$work/$size/m0" -o "$work/$size" --steps 1 --seed 9 >/dev/null
  bytes[$size]=$(du -sb "$work/$size/m0" | cut -f1)
  peak[$size]=$(peak_anon_kib "$wc" diff "$work/$size/m0" "$work/$size/step-0001" -o "$work/$size/d1")
  echo "diff of $size: model ${bytes[$size]} bytes, peak anonymous memory ${peak[$size]} KiB"
  rm -rf "$work/$size"
done
python3 - "${bytes[$small]}" "${bytes[$large]}" "${peak[$small]}" "${peak[$large]}" <<'PY'
import json, sys
bs, bl, ps, pl = map(int, sys.argv[1:])
print(json.dumps({"bench": "diff_memory", "small_bytes": bs, "large_bytes": bl,
                  "model_ratio": round(bl / bs, 2), "small_peak_anon_mib": round(ps / 1024, 1),
                  "large_peak_anon_mib": round(pl / 1024, 1),
                  "peak_ratio": round(pl / max(ps, 1), 3)}))
PY
