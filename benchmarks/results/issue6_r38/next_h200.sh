# Issue 6 round 38: only if the call lands on an H200 (gpu.txt says which). The standing table under the current
# dispatch (rounds 20-37 were all H100): busy time of the MLA decode grid of round 19's table and of the MoE at
# 1-64 tokens (k-chunked experts), each with the copy roofline measured in the same run. Timeout 600.
mkdir -p $OUT/mla $OUT/moe; nvidia-smi --query-gpu=name --format=csv | tee $OUT/gpu.txt
timeout 170 env PYTHONPATH=. OUT=$OUT/mla python3 benchmarks/kernels.py --only mla --mla-no-sweep --budget 160 \
  --device-span 12 --mla-shapes "1,1,8,131072;1,1,64,131072;8,1,8,32768;1,1,8,32768;1,1,64,32768;1,1,8,8192;1,1,64,8192;1,1,8,1024;1,4,8,32768" \
  > $OUT/mla.log 2>&1
echo "mla rc $?"; grep -E "copy|mla B=" $OUT/mla.log | cut -c1-500
timeout 250 env PYTHONPATH=. OUT=$OUT/moe python3 benchmarks/kernels.py --only moe --no-baselines --device-span 12 \
  --moe-rows 1,2,4,8,64 --budget 235 --moe-configs '[{"kernel": "default", "k_chunk": 256}]' > $OUT/moe.log 2>&1
echo "moe rc $?"; grep -E "copy|  moe M=" $OUT/moe.log | cut -c1-300
