# Issue 6, for the session after round 37 (second call): timeout 600.
#  1. the one-launch gemv at 2 tokens against two launches, paired (call 4's pair hit its limit);
#  2. 32-row decode at batches 2 and 8 with 8 warps (default_num_warps gives 4 there, which spill: 255 registers and
#     168 B of stack at 3 stages in the sm_90 build) now that those grids are one wave of 3-stage programs;
#  3. 16-key blocks at batch 2 (1K-2K), where default_block_k's half-wave rule picks 32 / 16 untimed.
mkdir -p $OUT/two $OUT/w8 $OUT/b2; nvidia-smi --query-gpu=name --format=csv | tee $OUT/gpu.txt
timeout 170 env PYTHONPATH=. OUT=$OUT/two python3 benchmarks/kernels.py --only moe --no-baselines --device-span 12 \
  --moe-rows 2 --budget 160 --moe-configs '[{"kernel": "default", "k_chunk": 256}, {"kernel": "gemv", "k_chunk": 256},
  {"kernel": "default", "k_chunk": 256}, {"kernel": "gemv", "k_chunk": 256}]' > $OUT/two.log 2>&1
echo "two rc $?"; grep -E "copy|  moe M=" $OUT/two.log | cut -c1-300
timeout 150 env PYTHONPATH=. OUT=$OUT/w8 python3 benchmarks/kernels.py --only mla --mla-no-sweep --budget 140 \
  --device-span 12 --mla-shapes "2,4,8,32768;8,4,8,32768;4,4,8,16384" --mla-configs '[{"num_warps": 8}]' \
  > $OUT/w8.log 2>&1
echo "w8 rc $?"; grep -E "copy|mla B=" $OUT/w8.log | cut -c1-600
timeout 120 env PYTHONPATH=. OUT=$OUT/b2 python3 benchmarks/kernels.py --only mla --mla-no-sweep --budget 110 \
  --device-span 12 --mla-shapes "2,1,8,1024;2,1,8,2048;1,1,8,512" --mla-configs '[{"block_k": 64}, {"block_k": 32}]' \
  > $OUT/b2.log 2>&1
echo "b2 rc $?"; grep -E "copy|mla B=" $OUT/b2.log | cut -c1-600
