# Issue 6, round 28 (session 33), call 3b: call 3 cut to what the last ~240 s of device time could hold: the
# dispatch (grouped kernels) and the one-launch kernel with the down tile halved (4 rows), at 10 tokens, k-chunked 256.
mkdir -p $OUT; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
C='[{"kernel": "default", "k_chunk": 256}, {"kernel": "gemv_pipelined", "k_chunk": 256, "block_n_down": 4}]'
mkdir -p $OUT/t10; timeout 140 env PYTHONPATH=. OUT=$OUT/t10 python3 benchmarks/kernels.py --only moe --moe-rows 10 \
  --no-baselines --moe-configs "$C" --budget 125 > $OUT/t10.log 2>&1
grep -E "copy|  moe M=" $OUT/t10.log | cut -c1-220
