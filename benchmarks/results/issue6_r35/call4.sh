# Issue 6, round 35 (session 40), call 4: two untimed MLA Triton options, then the MoE dispatch, on whatever card
# this is (the issue names the H200; rounds 20-34 ran on H100s). In order of importance (timeout 600):
#  1. MLA at T x H = 24-32 rows (block_m 32), where round 34's static SASS showed 4 warps spilling (255 registers,
#     128 B of stack) and 8 warps not (177 registers): the dispatch (4 warps) against 4 and 8 warps, kernel times;
#  2. the batch-1 / batch-8 decode shapes with 8 heads (the Triton kernel): the dispatch (f32 per-split outputs)
#     against bf16 per-split outputs (partial_dtype; half the bytes the kernel writes and the combine reads);
#  3. the MoE dispatch at 1-64 tokens, k-chunked 256 (the engine's layout), kernel times.
mkdir -p $OUT/warps $OUT/moe $OUT/mla; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv | tee $OUT/gpu.txt
timeout 170 env PYTHONPATH=. OUT=$OUT/warps python3 benchmarks/kernels.py --only mla --budget 150 --device-span 12 \
  --mla-shapes "1,4,8,32768;1,4,8,8192;1,3,8,32768;8,4,8,32768" \
  --mla-configs '[{"num_warps": 4}, {"num_warps": 8}]' > $OUT/warps.log 2>&1
echo "warps rc $?"; grep -E "copy|mla B=" $OUT/warps.log | cut -c1-600
timeout 160 env PYTHONPATH=. OUT=$OUT/mla python3 benchmarks/kernels.py --only mla --budget 140 --device-span 12 \
  --mla-shapes "1,1,8,8192;1,1,8,32768;1,1,8,1024;8,1,8,32768;1,1,8,131072" \
  --mla-configs '[{"partial_dtype": "bfloat16"}]' > $OUT/mla.log 2>&1
echo "mla rc $?"; grep -E "copy|mla B=" $OUT/mla.log | cut -c1-500
timeout 230 env PYTHONPATH=. OUT=$OUT/moe python3 benchmarks/kernels.py --only moe --no-baselines --device-span 12 \
  --moe-rows 1,2,4,6,8,16,64 --moe-configs '[{"kernel": "default", "k_chunk": 256}]' --budget 205 \
  > $OUT/moe.log 2>&1
echo "moe rc $?"; grep -E "copy|  moe M=" $OUT/moe.log | cut -c1-260
