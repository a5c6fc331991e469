# Issue 6 round 41, call 3: is_short_wide_decode's key bound raised to 12K at 64 rows in the batch (calls 1-2).
# (a) the marked GPU tests of the new 1 x 8 x 8 x 12K Triton case and the dispatch at 1-4 sequences; (b) the dispatch
# ("default", first, checked against the reference) against the Mosaic kernel at the newly moved shapes. The end-to-end GPU tests
# are left out: the embedded model's latent dims are not K2.6's, so it never runs the Mosaic kernel, and the rule
# only moves shapes between Mosaic and Triton. Timeout 400 (cut to fit the device time left).
mkdir -p $OUT/t; nvidia-smi --query-gpu=name --format=csv | tee $OUT/gpu.txt
timeout 170 env PYTHONPATH=. python3 -m pytest -q -rA -m gpu tests/test_kernels_mla.py \
  tests/test_kernels_mla_mosaic.py -k "gpu_kernel and 12288 or gpu_dispatch" --durations=5 > $OUT/pytest.log 2>&1
echo "pytest rc $?"; grep -E "passed|failed|FAILED|ERROR|rel_err|assert" $OUT/pytest.log | tail -20 | cut -c1-300
timeout 160 env PYTHONPATH=. OUT=$OUT/t python3 benchmarks/kernels.py --only mla --mla-no-sweep --budget 150 \
  --device-span 12 --mla-shapes "1,1,64,8192;1,8,8,12288;1,4,16,8192" \
  --mla-configs '[{"kernel": "mosaic"}]' > $OUT/t.log 2>&1
echo "timing rc $?"; grep -E "copy|mla B=" $OUT/t.log | cut -c1-900
