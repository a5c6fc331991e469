# Issue 6 round 37, call 1: issue6_r36/next1.sh as it was (H100).
# Issue 6, for the session after round 36 (not run yet; its device time ran out). Timeout 600; ask for nvidia-h200.
#  1. the marked MLA GPU tests: the new 1 x 1 x 8 x 16K case runs default_block_k's 32-key blocks with 3 stages;
#  2. the dispatch at 16K and 24K (32-key blocks, 3 stages) against 64-key blocks with the old 2 stages; 1K-2K with
#     16- and 32-key blocks (more one-block splits: call 2 had 1K at 5.3 us with 16-key blocks against 6.7, one run);
#  3. 32-row decode (3-4 tree tokens at 8 heads): 3 stages (do they fit in shared memory?) and one wave of splits;
#  4. the one-launch gemv at 2 tokens, which round 28 measured ~3 us slower than two launches when it still copied
#     its counters (1.1 us; gone since round 35);
#  5. 64-head decode (busy 0.51 at 32K on the Mosaic kernel's 128 splits of 2 key-block pairs): fewer, longer Mosaic
#     splits, and the Triton kernel with 16- or 32-row blocks and 3 stages (32-row blocks fit: 192.5 KB, sass_report).
mkdir -p $OUT/dec $OUT/few $OUT/rows32 $OUT/two $OUT/h64; nvidia-smi --query-gpu=name --format=csv | tee $OUT/gpu.txt
timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kernels_mla.py 2>&1 | tail -2
timeout 100 env PYTHONPATH=. OUT=$OUT/dec python3 benchmarks/kernels.py --only mla --mla-no-sweep --budget 85 \
  --device-span 12 --mla-shapes "1,1,8,16384;1,1,8,24576" --mla-configs '[{"block_k": 64, "num_stages": 2}]' \
  > $OUT/dec.log 2>&1
echo "dec rc $?"; grep -E "copy|mla B=" $OUT/dec.log | cut -c1-600
timeout 80 env PYTHONPATH=. OUT=$OUT/few python3 benchmarks/kernels.py --only mla --mla-no-sweep --budget 65 \
  --device-span 12 --mla-shapes "1,1,8,1024;1,1,8,2048" --mla-configs '[{"block_k": 16}, {"block_k": 32}]' \
  > $OUT/few.log 2>&1
echo "few rc $?"; grep -E "copy|mla B=" $OUT/few.log | cut -c1-600
timeout 150 env PYTHONPATH=. OUT=$OUT/rows32 python3 benchmarks/kernels.py --only mla --mla-no-sweep --budget 135 \
  --device-span 12 --mla-shapes "1,4,8,32768;1,4,8,131072;8,4,8,32768" \
  --mla-configs '[{"num_stages": 3}, {"num_splits": 132}, {"num_splits": 132, "num_stages": 3}, {"num_splits": 16}]' \
  > $OUT/rows32.log 2>&1
echo "rows32 rc $?"; grep -E "copy|mla B=" $OUT/rows32.log | cut -c1-1200
timeout 150 env PYTHONPATH=. OUT=$OUT/two python3 benchmarks/kernels.py --only moe --no-baselines --device-span 12 \
  --moe-rows 2 --budget 130 --moe-configs '[{"kernel": "default", "k_chunk": 256},
  {"kernel": "gemv_pipelined", "k_chunk": 256}]' > $OUT/two.log 2>&1
echo "two rc $?"; grep -E "copy|  moe M=" $OUT/two.log | cut -c1-300
timeout 150 env PYTHONPATH=. OUT=$OUT/h64 python3 benchmarks/kernels.py --only mla --mla-no-sweep --budget 135 \
  --device-span 12 --mla-shapes "1,1,64,32768;1,1,64,8192" \
  --mla-configs '[{"kernel": "mosaic", "num_splits": 64}, {"kernel": "mosaic", "num_splits": 32}, {},
                  {"block_m": 32, "num_stages": 3}, {"block_m": 16, "num_stages": 3}]' > $OUT/h64.log 2>&1
echo "h64 rc $?"; grep -E "copy|mla B=" $OUT/h64.log | cut -c1-1200
