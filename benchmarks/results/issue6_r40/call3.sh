# Issue 6 round 40, call 3: the new dispatch for one sequence of 64 query rows over <= 4K keys (the Triton kernel
# with 16-row blocks, 32 splits and bf16 partials; pallas_triton.is_short_64_row_decode). (a) the marked GPU tests of
# the Triton MLA kernel and of the dispatch; (b) the dispatch ("default", first) against the Mosaic kernel and the
# same Triton launch with float32 partials, at 1 x 64 heads 1K-4K and 8 tree tokens x 8 heads 2K-4K. Timeout 600.
mkdir -p $OUT/t; nvidia-smi --query-gpu=name --format=csv | tee $OUT/gpu.txt
timeout 240 env PYTHONPATH=. python3 -m pytest -q -rA -m gpu tests/test_kernels_mla.py \
  tests/test_kernels_mla_mosaic.py -k "gpu_kernel or dispatch" --durations=5 > $OUT/pytest.log 2>&1
echo "pytest rc $?"; grep -E "passed|failed|FAILED|ERROR|rel_err|assert" $OUT/pytest.log | tail -20 | cut -c1-300
timeout 300 env PYTHONPATH=. OUT=$OUT/t python3 benchmarks/kernels.py --only mla --mla-no-sweep --budget 290 \
  --device-span 12 --mla-shapes "1,1,64,4096;1,8,8,4096;1,1,64,2048;1,8,8,2048;1,1,64,1024" \
  --mla-configs '[{"kernel": "mosaic"}, {"partial_dtype": "float32"}]' > $OUT/t.log 2>&1
echo "timing rc $?"; grep -E "copy|mla B=" $OUT/t.log | cut -c1-900
