# Issue 6, prepared in round 40 for the next GPU call: bash benchmarks/results/issue6_r40/next.sh (timeout 600).
# On an H200 (gpu.txt says which): round 38's next_h200.sh, the standing table under the current dispatch (with
# round 40's rule; the H200 was last timed in round 19) plus 1 x 64 heads at 2K-4K. On an H100: whether
# is_short_wide_decode's 4K bound should move to 8K (round 40: 1 x 8 x 8 at 8K 16.0 us with 32 bf16 splits against
# Mosaic's 17.5, one run; 1 x 64 at 8K 15.8 against 15.9-16.2), two runs each of Mosaic and the short-wide launch
# forced by its arguments, at 64 and 128 rows over 8K keys, and 128 rows at 1K (not yet timed).
mkdir -p $OUT; nvidia-smi --query-gpu=name --format=csv | tee $OUT/gpu.txt
if grep -q H200 $OUT/gpu.txt; then
  bash benchmarks/results/issue6_r38/next_h200.sh
  mkdir -p $OUT/w; timeout 100 env PYTHONPATH=. OUT=$OUT/w python3 benchmarks/kernels.py --only mla --mla-no-sweep \
    --budget 90 --device-span 12 --mla-shapes "1,1,64,4096;1,1,64,2048" --mla-configs '[{"kernel": "mosaic"}]' \
    > $OUT/w.log 2>&1
  echo "w rc $?"; grep -E "copy|mla B=" $OUT/w.log | cut -c1-600; exit
fi
mkdir -p $OUT/w8
timeout 400 env PYTHONPATH=. OUT=$OUT/w8 python3 benchmarks/kernels.py --only mla --mla-no-sweep --budget 390 \
  --device-span 12 --mla-shapes "1,1,64,8192;1,8,8,8192;2,1,64,8192;1,16,8,8192;1,16,8,1024;2,8,8,1024" \
  --mla-configs '[{"kernel": "mosaic"}, {"block_m": 16, "block_k": 64, "num_splits": 32, "num_warps": 4, "partial_dtype": "bfloat16"},
  {"block_m": 16, "block_k": 64, "num_splits": 16, "num_warps": 4, "partial_dtype": "bfloat16"},
  {"kernel": "mosaic"}, {"block_m": 16, "block_k": 64, "num_splits": 32, "num_warps": 4, "partial_dtype": "bfloat16"},
  {"block_m": 16, "block_k": 64, "num_splits": 16, "num_warps": 4, "partial_dtype": "bfloat16"}]' > $OUT/w8.log 2>&1
echo "w8 rc $?"; grep -E "copy|mla B=" $OUT/w8.log | cut -c1-1400
