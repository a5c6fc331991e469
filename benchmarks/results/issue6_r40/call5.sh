# Issue 6 round 40, call 5: the dispatch generalised to 64-128 rows in the batch over <= 4K keys
# (pallas_triton.is_short_wide_decode: 16-row blocks, one wave of splits, bf16 partials). (a) the marked GPU tests
# of the Triton MLA kernel and the dispatch; (b) the dispatch ("default", first) against the Mosaic kernel and the
# same launch with float32 partials at 128 rows (2 x 64 heads, 16 tree tokens x 8 heads, 2 x 8 x 8). Timeout 600.
mkdir -p $OUT/t; nvidia-smi --query-gpu=name --format=csv | tee $OUT/gpu.txt
timeout 260 env PYTHONPATH=. python3 -m pytest -q -rA -m gpu tests/test_kernels_mla.py \
  tests/test_kernels_mla_mosaic.py -k "gpu_kernel or dispatch" --durations=5 > $OUT/pytest.log 2>&1
echo "pytest rc $?"; grep -E "passed|failed|FAILED|ERROR|rel_err|assert" $OUT/pytest.log | tail -20 | cut -c1-300
timeout 280 env PYTHONPATH=. OUT=$OUT/t python3 benchmarks/kernels.py --only mla --mla-no-sweep --budget 270 \
  --device-span 12 --mla-shapes "2,1,64,4096;1,16,8,4096;1,16,8,2048;2,8,8,2048" \
  --mla-configs '[{"kernel": "mosaic"}, {"partial_dtype": "float32"}]' > $OUT/t.log 2>&1
echo "timing rc $?"; grep -E "copy|mla B=" $OUT/t.log | cut -c1-900
