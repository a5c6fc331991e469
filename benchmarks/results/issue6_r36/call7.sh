# Issue 6, round 36, call 7: batch-1 decode at 4K-16K (8 heads), where one wave of one-block splits leaves a third
# stage nothing to load ahead: fewer splits of 2-4 blocks with 3 stages, and 32-key blocks. Timeout 170.
mkdir -p $OUT/dec; nvidia-smi --query-gpu=name --format=csv | tee $OUT/gpu.txt
timeout 150 env PYTHONPATH=. OUT=$OUT/dec python3 benchmarks/kernels.py --only mla --mla-no-sweep --budget 135 \
  --device-span 12 --mla-shapes "1,1,8,8192;1,1,8,16384;1,1,8,4096" \
  --mla-configs '[{"num_splits": 64, "num_stages": 3}, {"num_splits": 43, "num_stages": 3},
                  {"block_k": 32, "num_splits": 64, "num_stages": 3}, {"block_k": 32, "num_splits": 128, "num_stages": 3},
                  {"num_splits": 64, "num_stages": 3, "partial_dtype": "bfloat16"}]' > $OUT/dec.log 2>&1
echo "dec rc $?"; grep -E "copy|mla B=" $OUT/dec.log | cut -c1-1200
