# Issue 6, round 35, call 5 (for the next session; not run in session 40, whose device time ran out). Ask for it as
# nvidia-h200 (the card; rounds 20-35 ran on H100s); the reply says which card ran it. Timeout 600.
#  1. the MoE dispatch since planes_consts at the token counts round 35 did not reach, most wanted first: 6
#     (k-chunked 256), 3, 8, 16, 64, 32 (stored and k-chunked each; kernel times);
#  2. the marked MLA GPU tests, among them the new 1 x 4 x 8 x 8K case that runs 8 warps at 32-row blocks;
#  3. the batch-1 / batch-8 decode shapes under the MLA dispatch (to compare with round 19's H200 figures).
mkdir -p $OUT/moe $OUT/mla; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv | tee $OUT/gpu.txt
timeout 330 env PYTHONPATH=. OUT=$OUT/moe python3 benchmarks/kernels.py --only moe --no-baselines --device-span 12 \
  --moe-rows 6,3,8,16,64,32 --moe-configs '[{"kernel": "default", "k_chunk": 256}]' \
  --budget 305 > $OUT/moe.log 2>&1
echo "moe rc $?"; grep -E "copy|  moe M=" $OUT/moe.log | cut -c1-260
timeout 90 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kernels_mla.py 2>&1 | tail -2
timeout 140 env PYTHONPATH=. OUT=$OUT/mla python3 benchmarks/kernels.py --only mla --mla-no-sweep --budget 120 \
  --device-span 12 --mla-shapes "1,1,8,8192;1,1,8,32768;1,1,8,131072;1,1,64,32768;8,1,8,32768;1,1,8,1024" \
  > $OUT/mla.log 2>&1
echo "mla rc $?"; grep -E "copy|mla B=" $OUT/mla.log | cut -c1-400
