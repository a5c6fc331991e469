# Issue 6, round 29 (session 34), call 6: the new dispatch (the grouped one-launch kernel from 7 to 512 tokens) on a
# GPU: the end-to-end test (the embedded model's rounds with every Pallas kernel against the XLA path's tokens) and the
# dispatch timed at 7, 9 and 20 tokens (k-chunked 256, and the stored layout first).
mkdir -p $OUT/t; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
timeout 200 env PYTHONPATH=. python3 -m pytest -q -rA -m gpu tests/test_kernels_e2e.py --durations=0 > $OUT/pytest.log 2>&1
echo "pytest rc $?"; tail -6 $OUT/pytest.log | cut -c1-300
timeout 110 env PYTHONPATH=. OUT=$OUT/t python3 benchmarks/kernels.py --only moe --moe-rows 7,9,20 --no-baselines \
  --moe-configs '[{"kernel": "default", "k_chunk": 256}]' --budget 100 > $OUT/t.log 2>&1
echo "kernels rc $?"; grep -E "copy|  moe M=" $OUT/t.log | cut -c1-220
