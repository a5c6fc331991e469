# Issue 6 round 37, call 4: the new defaults (32-row decode one wave + 3 stages, 16/32-key blocks at few keys,
# Mosaic one pair a split, one-launch gemv at 2 tokens) under the dispatch, against the old choices.
mkdir -p $OUT/r32 $OUT/few $OUT/two $OUT/mos
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kernels_mla.py tests/test_kernels_mla_mosaic.py \
  "tests/test_moe_gemv_pipelined.py::test_gpu_kernel[2-256-opts11]" 2>&1 | tail -2
timeout 120 env PYTHONPATH=. OUT=$OUT/r32 python3 benchmarks/kernels.py --only mla --mla-no-sweep --budget 110 \
  --device-span 12 --mla-shapes "1,4,8,32768;1,4,8,131072;8,4,8,32768;1,3,8,32768;1,4,8,16384;1,4,8,2048" \
  --mla-configs '[{"block_k": 64, "num_stages": 2}]' > $OUT/r32.log 2>&1
echo "r32 rc $?"; grep -E "copy|mla B=" $OUT/r32.log | cut -c1-600
timeout 80 env PYTHONPATH=. OUT=$OUT/few python3 benchmarks/kernels.py --only mla --mla-no-sweep --budget 70 \
  --device-span 12 --mla-shapes "1,1,8,1024;1,1,8,2048;1,1,8,3072;1,2,8,2048" \
  --mla-configs '[{"block_k": 64}]' > $OUT/few.log 2>&1
echo "few rc $?"; grep -E "copy|mla B=" $OUT/few.log | cut -c1-600
timeout 80 env PYTHONPATH=. OUT=$OUT/two python3 benchmarks/kernels.py --only moe --no-baselines --device-span 12 \
  --moe-rows 2 --budget 70 --moe-configs '[{"kernel": "default", "k_chunk": 256}, {"kernel": "gemv", "k_chunk": 256}]' \
  > $OUT/two.log 2>&1
echo "two rc $?"; grep -E "copy|  moe M=" $OUT/two.log | cut -c1-300
timeout 90 env PYTHONPATH=. OUT=$OUT/mos python3 benchmarks/kernels.py --only mla --mla-no-sweep --budget 80 \
  --device-span 12 --mla-shapes "1,1,64,4096;1,1,64,8192" \
  --mla-configs '[{"kernel": "mosaic", "num_splits": 16}, {"kernel": "mosaic", "num_splits": 32}]' > $OUT/mos.log 2>&1
echo "mos rc $?"; grep -E "copy|mla B=" $OUT/mos.log | cut -c1-600
