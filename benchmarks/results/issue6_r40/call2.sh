# Issue 6 round 40, call 2 (run as one command line; kept here as run): 64-head batch-1 decode at 2K-16K, the Triton
# launch of 16-row blocks of 64 keys, 4 warps, at 16/32/64 splits and with bf16 partials, against Mosaic; the first
# config is repeated last as a drift check. Timeout 450.
mkdir -p $OUT/h64b; nvidia-smi --query-gpu=name --format=csv > $OUT/gpu.txt; timeout 420 env PYTHONPATH=. OUT=$OUT/h64b python3 benchmarks/kernels.py --only mla --mla-no-sweep --budget 400 --device-span 12 --mla-shapes "1,1,64,4096;1,1,64,2048;1,1,64,8192;1,1,64,16384" --mla-configs '[
  {"block_m": 16, "block_k": 64, "num_splits": 32, "num_warps": 4},
  {"block_m": 16, "block_k": 64, "num_splits": 32, "num_warps": 4, "partial_dtype": "bfloat16"},
  {"block_m": 16, "block_k": 64, "num_splits": 16, "num_warps": 4},
  {"block_m": 16, "block_k": 64, "num_splits": 64, "num_warps": 4},
  {"kernel": "mosaic"},
  {"block_m": 16, "block_k": 64, "num_splits": 32, "num_warps": 4}]' > $OUT/h64b.log 2>&1; echo rc $?; grep -E "copy|mla B=" $OUT/h64b.log | cut -c1-1600
