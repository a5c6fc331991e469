# Issue 6 round 44, call 5 (timeout 340), for a budget too small for call 4. On an H200: the MLA half of the standing
# table (round 42's call3.sh H200 branch, 170 s), then the 1-token gemv with and without trigger_dependents. On an
# H100: the Triton same-bits tests (tests/test_dependent_launch.py without the Mosaic ones), the 1-token gemv A/B/A,
# and 8-head decode at 8K and 1K with and without the trigger. At most 8 files come back: the table copies removed.
mkdir -p $OUT/moe $OUT/mla
if nvidia-smi --query-gpu=name --format=csv | grep -q H200; then
  bash benchmarks/results/issue6_r42/call3.sh
else
  nvidia-smi --query-gpu=name --format=csv > $OUT/gpu.txt
  timeout 80 python3 -m pytest -q -p no:cacheprovider -rs tests/test_dependent_launch.py -k "not mosaic" \
    > $OUT/tests.log 2>&1
  echo "tests rc $?"; tail -3 $OUT/tests.log
fi
timeout 160 env PYTHONPATH=. OUT=$OUT/moe python3 benchmarks/kernels.py --only moe --no-baselines --device-span 12 \
  --moe-rows 1 --budget 145 --moe-configs '[{"kernel": "default", "k_chunk": 256},
  {"kernel": "gemv", "k_chunk": 256, "trigger_dependents": true}, {"kernel": "gemv", "k_chunk": 256}]' \
  > $OUT/moe.log 2>&1
echo "moe rc $?"; grep -E "copy|  moe M=" $OUT/moe.log | cut -c1-400
if ! grep -q H200 $OUT/gpu.txt; then
  timeout 95 env PYTHONPATH=. OUT=$OUT/mla python3 benchmarks/kernels.py --only mla --mla-no-sweep --budget 85 \
    --device-span 12 --mla-shapes "1,1,8,8192;1,1,8,1024" \
    --mla-configs '[{"kernel": "pallas", "trigger_dependents": true}, {"kernel": "pallas"}]' > $OUT/mla.log 2>&1
  echo "mla rc $?"; grep -E "copy|mla B=" $OUT/mla.log | cut -c1-900
fi
rm -f $OUT/*/kernels_table.md
