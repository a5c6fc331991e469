# Issue 6 round 41, call 3b: call3.sh cut to fit the last ~200 s of device time: the marked GPU tests of the new
# 1 x 8 x 8 x 12K Triton case and the dispatch at 1-4 sequences, then the dispatch ("default", checked against the
# reference) against the Mosaic kernel at 1 x 8 x 8 x 12K only. Timeout 200.
mkdir -p $OUT/t; nvidia-smi --query-gpu=name --format=csv | tee $OUT/gpu.txt
timeout 120 env PYTHONPATH=. python3 -m pytest -q -rA -m gpu tests/test_kernels_mla.py \
  tests/test_kernels_mla_mosaic.py -k "gpu_kernel and 12288 or gpu_dispatch" --durations=5 > $OUT/pytest.log 2>&1
echo "pytest rc $?"; grep -E "passed|failed|FAILED|ERROR|rel_err|assert" $OUT/pytest.log | tail -20 | cut -c1-300
timeout 70 env PYTHONPATH=. OUT=$OUT/t python3 benchmarks/kernels.py --only mla --mla-no-sweep --budget 60 \
  --device-span 12 --mla-shapes "1,8,8,12288" --mla-configs '[{"kernel": "mosaic"}]' > $OUT/t.log 2>&1
echo "timing rc $?"; grep -E "copy|mla B=" $OUT/t.log | cut -c1-900
