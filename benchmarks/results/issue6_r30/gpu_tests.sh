# Issue 6, round 30 (session 35): the marked GPU tests of the INT4 MoE kernels after round 29's refactor of
# pallas_triton.py and the new dispatch, with this round's checks: both one-launch kernels bit for bit against their
# two-launch forms, and with the sleeping wait (wait_sleep_ns). Each case compiles at the K2.6 shard's shapes (~40-60 s),
# so a call runs a subset: bash gpu_tests.sh "PYTEST_K_EXPRESSION" FILES... (default: the two one-launch files).
K=${1:-}; shift || true; FILES=${@:-tests/test_moe_grouped_one_launch.py tests/test_moe_gemv_pipelined.py}
mkdir -p $OUT; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
timeout 570 env PYTHONPATH=. python3 -m pytest -q -rA -m gpu ${K:+-k "$K"} $FILES --durations=0 > $OUT/pytest.log 2>&1
echo "pytest rc $?"; grep -E "passed|failed|FAILED|ERROR|Mismatch|Max abs" $OUT/pytest.log | tail -30 | cut -c1-300
