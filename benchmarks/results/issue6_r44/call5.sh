# Issue 6 round 44, call 5 (timeout 340), for a budget too small for call 4. On an H200: the MLA half of the standing
# table (round 42's call3.sh H200 branch, 170 s), then the 1-token gemv with and without trigger_dependents. On an
# H100: the Triton same-bits tests (tests/test_dependent_launch.py without the Mosaic ones), the 1-token gemv A/B/A,
# and 8-head decode at 8K and 1K with and without the trigger (trigger_ab.sh).
if nvidia-smi --query-gpu=name --format=csv | grep -q H200; then
  bash benchmarks/results/issue6_r42/call3.sh
  rm -f $OUT/t/kernels_table.md               # at most 8 files come back
  bash benchmarks/results/issue6_r44/trigger_ab.sh moe 145
else
  nvidia-smi --query-gpu=name --format=csv > $OUT/gpu.txt
  timeout 80 python3 -m pytest -q -p no:cacheprovider -rs tests/test_dependent_launch.py -k "not mosaic" \
    > $OUT/tests.log 2>&1
  echo "tests rc $?"; tail -3 $OUT/tests.log
  bash benchmarks/results/issue6_r44/trigger_ab.sh moe 145
  bash benchmarks/results/issue6_r44/trigger_ab.sh mla "1,1,8,8192;1,1,8,1024" 85
fi
