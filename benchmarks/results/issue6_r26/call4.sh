# Issue 6, round 26 (session 31), call 4: the new default (down_row_splits 2 at up to 8 tokens) on the machine,
# an H200, if one comes. The dispatch with it on k-chunked 256 experts (kernels.py also puts the stored-layout dispatch
# first), next to the gemv forced back to one 8-row down tile (down_row_splits 1) on k-chunked experts, at 2, 4 and 6
# tokens. Twice, one process each.
mkdir -p $OUT; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
C='[{"kernel": "default", "k_chunk": 256}, {"kernel": "gemv", "k_chunk": 256, "down_row_splits": 1}]'
for r in 1 2; do
  mkdir -p $OUT/r$r
  timeout 130 env PYTHONPATH=. OUT=$OUT/r$r python3 benchmarks/kernels.py --only moe --moe-rows 2,4,6 --no-baselines \
    --moe-configs "$C" --budget 120 > $OUT/r$r.log 2>&1
  grep -E "copy|  moe M=" $OUT/r$r.log | cut -c1-200
done
