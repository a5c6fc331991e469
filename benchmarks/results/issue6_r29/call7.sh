# Issue 6, round 29 (session 34), call 7 (same warm machine as call 6): at 7 tokens, the bound between the two
# one-launch kernels: the dispatch (now the grouped one-launch kernel) against the one-launch gemv, k-chunked 256.
mkdir -p $OUT/t; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
timeout 150 env PYTHONPATH=. OUT=$OUT/t python3 benchmarks/kernels.py --only moe --moe-rows 7 --no-baselines \
  --moe-configs '[{"kernel": "default", "k_chunk": 256}, {"kernel": "gemv_pipelined", "k_chunk": 256}]' --budget 140 \
  > $OUT/t.log 2>&1
echo "kernels rc $?"; grep -E "copy|  moe M=" $OUT/t.log | cut -c1-220
