#!/usr/bin/env bash
# A rank that is killed, or that leaves while the others train, ends the whole job non-zero
# within 60 s, and the checkpoint at the target stays loadable; the CLI under mpirun refuses a
# batch that does not divide, and otherwise prints once and writes its files once.
#   kill_and_leave_test.sh MPIEXEC DISTRIBUTED_TEST VOLT_CLI SOURCE_DIR
set -uo pipefail
mpiexec=$1 prog=$2 volt=$3 src=$4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
two() { timeout 120 "$mpiexec" --oversubscribe -np 2 "$@"; }

"$prog" write "$dir" || fail "writing the model"
for mode in kill leave; do
  start=$(date +%s)
  two "$prog" "$mode" "$dir" >"$dir/$mode.log" 2>&1
  rc=$?
  secs=$(($(date +%s) - start))
  echo "== $mode: exit $rc after ${secs} s"
  tail -n 4 "$dir/$mode.log"
  [ "$rc" -ne 0 ] || fail "$mode: the job exited 0"
  [ "$rc" -ne 124 ] || fail "$mode: the job hung (killed by timeout)"
  [ "$secs" -lt 60 ] || fail "$mode: the job took ${secs} s to end"
  if [ "$mode" = leave ]; then
    grep -q "rank 1 left the job" "$dir/$mode.log" || fail "leave: no message naming rank 1"
  fi
  "$prog" load "$dir" || fail "$mode: the checkpoint does not load"
done

/usr/bin/python3 "$src/models/make_dataset.py" "$dir/data" 512 >/dev/null || fail "make_dataset.py"
data=(--input "x=$dir/data/x.npy" --label "$dir/data/y.npy" --threads 1)
two "$volt" train "$src/models/mnist_mlp.onnx" "${data[@]}" --batch 63 >"$dir/odd.log" 2>&1
rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "--batch 63 on 2 ranks: exit $rc"
grep -q "does not divide among 2 ranks" "$dir/odd.log" || { cat "$dir/odd.log"; fail "no message"; }

two "$volt" train "$src/models/mnist_mlp.onnx" "${data[@]}" --batch 64 --epochs 2 --accumulate 2 \
  --validation-split 0.25 --checkpoint "$dir/cli.ckpt" --export "$dir/cli.onnx" >"$dir/cli.log" 2>&1 ||
  { cat "$dir/cli.log"; fail "volt train under mpirun"; }
cat "$dir/cli.log"
[ "$(grep -c '^training ' "$dir/cli.log")" = 1 ] || fail "the header printed more than once"
[ "$(grep -c '^epoch 2: ' "$dir/cli.log")" = 1 ] || fail "the epoch line printed more than once"
grep -q "2 ranks x 32 samples" "$dir/cli.log" || fail "no ranks in the header"
grep -q "^distributed: 2 ranks" "$dir/cli.log" || fail "no exchange line"
[ -s "$dir/cli.ckpt" ] && [ -s "$dir/cli.onnx" ] || fail "checkpoint or export missing"
"$volt" run "$dir/cli.onnx" --input "x=$dir/data/x.npy" >/dev/null || fail "the export does not run"
echo "PASS"
