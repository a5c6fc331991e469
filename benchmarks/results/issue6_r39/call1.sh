# Issue 6 round 39, call 1. On an H200 (gpu.txt says which card): round 38's next_h200.sh, the standing table under
# the current dispatch. On an H100: (a) 64-head batch-1 decode at 4K-8K (the Mosaic kernel at 0.13-0.23 busy) against
# the Triton kernel with 16- and 32-row blocks and more programs (its rows re-read the shared cache from L2);
# (b) bf16 per-split partials for 8-head decode under round 36-38's one-wave, 3-stage launches (round 35 found them
# no faster under the two-wave ones). Timeout 600.
mkdir -p $OUT; nvidia-smi --query-gpu=name --format=csv | tee $OUT/gpu.txt
if grep -q H200 $OUT/gpu.txt; then bash benchmarks/results/issue6_r38/next_h200.sh; exit; fi
mkdir -p $OUT/h64 $OUT/p16
timeout 330 env PYTHONPATH=. OUT=$OUT/h64 python3 benchmarks/kernels.py --only mla --mla-no-sweep --budget 320 \
  --device-span 12 --mla-shapes "1,1,64,4096;1,1,64,8192" --mla-configs '[
  {"block_m": 16, "block_k": 32, "num_splits": 32, "num_warps": 4},
  {"block_m": 16, "block_k": 32, "num_splits": 32, "num_warps": 4, "partial_dtype": "bfloat16"},
  {"block_m": 16, "block_k": 64, "num_splits": 32, "num_warps": 4},
  {"block_m": 32, "block_k": 64, "num_splits": 64, "num_warps": 8},
  {"block_m": 16, "block_k": 16, "num_splits": 64, "num_warps": 4},
  {"kernel": "mosaic"}]' > $OUT/h64.log 2>&1
echo "h64 rc $?"; grep -E "copy|mla B=" $OUT/h64.log | cut -c1-1500
timeout 140 env PYTHONPATH=. OUT=$OUT/p16 python3 benchmarks/kernels.py --only mla --mla-no-sweep --budget 130 \
  --device-span 12 --mla-shapes "1,1,8,32768;1,1,8,16384" \
  --mla-configs '[{"partial_dtype": "bfloat16"}, {}, {"partial_dtype": "bfloat16"}]' > $OUT/p16.log 2>&1
echo "p16 rc $?"; grep -E "copy|mla B=" $OUT/p16.log | cut -c1-900
