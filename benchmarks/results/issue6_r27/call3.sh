# Issue 6, round 27 (session 32), call 3: call 2 found lag 99 (every gate/up program first, then the down programs,
# in one launch) the fastest at 6 and 8 tokens. It against the dispatch on k-chunked 256 experts at 1, 2, 4 and 10
# tokens, then 6 and 8 again.
mkdir -p $OUT; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
C='[{"kernel": "default", "k_chunk": 256}, {"kernel": "gemv_pipelined", "k_chunk": 256, "lag": 99}]'
mkdir -p $OUT/r1
timeout 500 env PYTHONPATH=. OUT=$OUT/r1 python3 benchmarks/kernels.py --only moe --moe-rows 1,2,4,10,6,8 --no-baselines \
  --moe-configs "$C" --budget 470 > $OUT/r1.log 2>&1
grep -E "copy|  moe M=" $OUT/r1.log | cut -c1-220
