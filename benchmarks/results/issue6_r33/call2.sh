# Issue 6, round 33, call 2: the marked GPU tests of what changed (the MLA Triton kernel now reads the bool mask
# itself; the one-launch gemv's flag wait), then batch-1 MLA decode at 1K / 8K / 32K with kernel times (the
# convert before the attention kernel should be gone). ~6 minutes; run with the run tool's timeout_s 600.
mkdir -p $OUT/mla; nvidia-smi --query-gpu=name --format=csv
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_mla.py tests/test_moe_gemv_pipelined.py \
  -k gpu 2>&1 | tail -5
timeout 150 env PYTHONPATH=. OUT=$OUT/mla python3 benchmarks/kernels.py --only mla --mla-no-sweep --device-span 12 \
  --budget 120 --mla-shapes "1,1,8,32768;1,1,8,8192;1,1,8,1024" > $OUT/mla.log 2>&1
echo "mla rc $?"; grep -E "copy|^\| 1 \| 1 \|" $OUT/mla.log | cut -c1-300
