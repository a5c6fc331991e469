# Issue 6, round 26 (session 31), call 2: call 1's comparison at 2-8 tokens (call 1 got through one token only: each
# 1-token config took ~25 s, mostly compiling, and the time budget ran out). The down kernel's K loop with and
# without its per-step layout conversion of the scale tile (down_row_splits 2: the 8-row tile as two 4-row tiles
# sharing the activation loads), on k-chunked experts (chunk 256): the dispatch, the gemv as before and the gemv
# with the halves (kernels.py puts the dispatch on the stored layout first). Twice, one process each.
mkdir -p $OUT; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
C='[{"kernel": "default", "k_chunk": 256}, {"kernel": "gemv", "k_chunk": 256}, {"kernel": "gemv", "k_chunk": 256, "down_row_splits": 2}]'
for r in 1 2; do
  mkdir -p $OUT/r$r
  timeout 135 env PYTHONPATH=. OUT=$OUT/r$r python3 benchmarks/kernels.py --only moe --moe-rows 2,4,6,8 --no-baselines \
    --moe-configs "$C" --budget 125 > $OUT/r$r.log 2>&1
  grep -E "copy|  moe M=" $OUT/r$r.log | cut -c1-200
done
