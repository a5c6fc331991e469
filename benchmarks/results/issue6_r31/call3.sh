# Issue 6, round 31, call 3 (inline on the same warm machine; this file records the command): the rest of the marked
# GPU tests of tests/test_kernels_moe.py, tests/test_bf16_planes.py and tests/test_moe_k_chunks.py.
mkdir -p $OUT; timeout 560 env PYTHONPATH=. python3 -m pytest -q -rA -m gpu tests/test_kernels_moe.py tests/test_bf16_planes.py tests/test_moe_k_chunks.py -k "not (1-gemv or 64-grouped_k or 600-grouped] or 1-grouped_f32 or 64-gemv_k)" --durations=0 > $OUT/pytest.log 2>&1; echo "pytest rc $?"; grep -E "passed|failed|FAILED|ERROR|PASSED" $OUT/pytest.log | tail -30 | cut -c1-300
