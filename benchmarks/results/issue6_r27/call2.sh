# Issue 6, round 27 (session 32), call 2: call 1 found lag 2 faster than lag 1 (and the ticket slower). Longer lags
# here: 3, 4 and 99 (= every gate/up program first: the two-launch order in one launch), on k-chunked 256 experts,
# at 6, 8 and 12 tokens, next to the dispatch.
mkdir -p $OUT; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
P='{"kernel": "gemv_pipelined", "k_chunk": 256'
C="[{\"kernel\": \"default\", \"k_chunk\": 256}, $P, \"lag\": 3}, $P, \"lag\": 4}, $P, \"lag\": 99}]"
mkdir -p $OUT/r1
timeout 560 env PYTHONPATH=. OUT=$OUT/r1 python3 benchmarks/kernels.py --only moe --moe-rows 6,8,12 --no-baselines \
  --moe-configs "$C" --budget 520 > $OUT/r1.log 2>&1
grep -E "copy|  moe M=" $OUT/r1.log | cut -c1-220
