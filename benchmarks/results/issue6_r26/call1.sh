# Issue 6, round 26 (session 31), call 1: the down kernel's K loop with and without its per-step layout conversion
# of the scale tile (down_row_splits 2: the 8-row tile as two 4-row tiles sharing the activation loads; sm_90 SASS:
# no barrier, no shared memory in the loop). On k-chunked experts (chunk 256, the engine's layout on a GPU), at 1-8
# tokens: the dispatch, the gemv as before (down_row_splits 1) and the gemv with the halves. kernels.py also puts the
# dispatch on the stored layout first. The whole comparison twice, one process each, so that the noise shows.
mkdir -p $OUT; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
C='[{"kernel": "default", "k_chunk": 256}, {"kernel": "gemv", "k_chunk": 256}, {"kernel": "gemv", "k_chunk": 256, "down_row_splits": 2}]'
for r in 1 2; do
  mkdir -p $OUT/r$r
  timeout 125 env PYTHONPATH=. OUT=$OUT/r$r python3 benchmarks/kernels.py --only moe --moe-rows 1,2,4,6,8 --no-baselines \
    --moe-configs "$C" --budget 110 > $OUT/r$r.log 2>&1
  grep -E "copy|  moe M=" $OUT/r$r.log | cut -c1-200
done
