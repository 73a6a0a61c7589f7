#!/usr/bin/env bash
# Tensor-subset subscription (docs/sharded_publish.md, "Tensor subsets"): 2 ranks publish slices
# of the same tensors; an agent with --tensors 'NAME#0*' fetches only rank 0's slices (and the
# files' headers), commits a partial version byte-identical to the source where it holds it,
# receives fewer bytes than a whole agent beside it, and commits the next (delta) version too.
source "$(dirname "$0")/rollout_lib.bash" "$1"

world=2
# make_parts STEPS: $work/part/R/S/model.safetensors: rank R's row slices mlp.weight#START and
# mlp.bias#START (~1 MiB); each step changes ~2% of the bytes.
make_parts() {
  python3 - "$work/part" "$world" "$1" <<'EOF'
import json, os, random, struct, sys
root, world, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = 256
for r in range(world):
    rng = random.Random(r)
    w = rows * 1024 * 4
    data = bytearray(rng.randbytes(w + 4096))
    for s in range(1, steps + 1):
        if s > 1:
            for _ in range(len(data) // 50):
                data[rng.randrange(len(data))] = rng.randrange(256)
        start = r * rows
        header = {"mlp.weight#%d" % start: {"dtype": "F32", "shape": [rows, 1024],
                                           "data_offsets": [0, w]},
                  "mlp.bias#%d" % start: {"dtype": "U8", "shape": [4096],
                                         "data_offsets": [w, w + 4096]}}
        text = json.dumps(header).encode()
        text += b" " * (-len(text) % 8)
        d = os.path.join(root, str(r), str(s))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "model.safetensors"), "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text + bytes(data))
EOF
}

rank() {  # rank R S: rank R publishes step S (background, seeding until stopped)
  local r="$1" s="$2"
  kill_process "rank$r"
  "$wc" publish --coordinator "$coord" --store "$work/rank$r" --channel "$channel" \
    --dir "$work/part/$r/$s" --rank "$r" --world "$world" --writer-id trainer \
    --chunk-size 256KiB --until never --secret-file "$work/secret" \
    >>"$work/rank$r.out" 2>>"$work/rank$r.log" &
  pids[rank$r]=$!
}

part_file() { echo "$work/$1/$channel/versions/$2/$(printf 'rank-%05d-of-%05d' "$3" "$world")/model.safetensors"; }
# received NAME V: the chunk bytes agent NAME received for version V (its completion log line).
received() {
  grep -o "v$2 complete in [0-9.]* s: received [0-9]* chunk bytes" "$work/$1.log" | tail -n 1 |
    awk '{print $7}'
}

make_parts 2
start_coordinator
start_agent whole
start_agent sub --tensors 'mlp.weight#0*' --tensors 'mlp.bias#0*'

for ((r = 0; r < world; r++)); do rank "$r" 1; done
wait_for 60 all_current 1 whole sub || fail "the agents did not commit v1"
record="$work/sub/$channel/versions/1/.weightcast-partial.json"
[[ -f "$record" ]] || fail "the subset agent's v1 is not marked partial"
[[ ! -e "$work/whole/$channel/versions/1/.weightcast-partial.json" ]] ||
  fail "the whole agent's v1 is marked partial"
cmp -s "$work/part/0/1/model.safetensors" "$(part_file sub 1 0)" ||
  fail "the subset agent's rank-0 file differs from the source"
cmp -s "$work/part/1/1/model.safetensors" "$(part_file sub 1 1)" &&
  fail "the subset agent holds rank 1's bytes too"
cmp -s "$work/part/1/1/model.safetensors" "$(part_file whole 1 1)" ||
  fail "the whole agent's rank-1 file differs from the source"
"$wc" store list --root "$work/sub" | grep -q "^  \* 1 .*partial" ||
  fail "store list does not show the subset agent's v1 as partial: $("$wc" store list --root "$work/sub")"
"$wc" store verify --root "$work/sub" --channel "$channel" 1 | grep -q ": ok (partial" ||
  fail "store verify does not say v1 is partial"
"$wc" store list --root "$work/whole" | grep -q "partial" && fail "the whole agent's v1 is listed partial"
sub1="$(received sub 1)" whole1="$(received whole 1)"
[[ -n "$sub1" && -n "$whole1" ]] || fail "no completion lines (sub '$sub1', whole '$whole1')"
((sub1 < whole1)) || fail "the subset agent received $sub1 bytes, the whole one $whole1"
echo "ok   v1: the subset agent committed a partial version, rank 0's file byte for byte;" \
  "received $sub1 of $whole1 bytes ($(python3 -c "print(round($sub1 / $whole1, 3))"))"

# The partial version read through Python: only rank 0's slices, another is a clear error.
# The module is built beside the binary (build/<preset>/python); any python3 with numpy runs it.
pydir="$(cd "$(dirname "$wc")/../.." && pwd)/python" py=""
for candidate in python3 /usr/bin/python3; do
  if PYTHONPATH="$pydir" "$candidate" -c 'import weightcast' 2>/dev/null; then py="$candidate"; break; fi
done
if [[ -z "$py" ]]; then
  echo "skip the Python check: no python3 here imports weightcast from $pydir"
else
  PYTHONPATH="$pydir" "$py" - "$work/sub" "$channel" <<'EOF' ||
import sys, weightcast
v = weightcast.Subscriber(sys.argv[1], sys.argv[2]).wait(timeout=10)
assert v.partial and sorted(v) == ["mlp.bias#0", "mlp.weight#0"], (v.partial, sorted(v))
assert v["mlp.bias#0"].shape == (4096,)
try:
    v["mlp.weight#256"]
    raise SystemExit("an unselected tensor was read")
except weightcast.FailedPreconditionError as e:
    assert "was not received" in str(e), e
EOF
    fail "Python does not read the partial version as it should"
  echo "ok   Python's Version offers only the selected slices; another raises FailedPreconditionError"
fi

# v2: a delta per part; the subset agent applies it onto the chunks it holds.
for ((r = 0; r < world; r++)); do rank "$r" 2; done
wait_for 60 all_current 2 whole sub || fail "the agents did not commit v2"
cmp -s "$work/part/0/2/model.safetensors" "$(part_file sub 2 0)" ||
  fail "the subset agent's v2 rank-0 file differs from the source"
cmp -s "$work/part/1/2/model.safetensors" "$(part_file whole 2 1)" ||
  fail "the whole agent's v2 differs from the source"
[[ -f "$work/sub/$channel/versions/2/.weightcast-partial.json" ]] || fail "v2 is not partial"
grep -q "target v2: .*fetching delta payloads" "$work/sub.log" ||
  fail "the subset agent did not fetch v2 as payloads: $(grep 'target v2' "$work/sub.log")"
echo "ok   v2: the subset agent applied the delta onto its chunks" \
  "(received $(received sub 2) of $(received whole 2) bytes)"
