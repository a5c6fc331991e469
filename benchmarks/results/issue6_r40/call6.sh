# Issue 6 round 40, call 6 (run as one command line; kept here as run): the end-to-end GPU tests (AR and DDTree
# N = 32 on the embedded default model, float32: kernels against the XLA path's tokens) after the round's
# dispatch change and the float32-inputs partials rule. Timeout 290.
mkdir -p $OUT; nvidia-smi --query-gpu=name --format=csv | tee $OUT/gpu.txt; timeout 270 env PYTHONPATH=. python3 -m pytest -q -rA -m gpu tests/test_kernels_e2e.py tests/test_kernels_mla.py -k "e2e or match_reference_tokens or short_wide" --durations=5 > $OUT/pytest.log 2>&1; echo "pytest rc $?"; grep -E "passed|failed|FAILED|ERROR|assert" $OUT/pytest.log | tail -15 | cut -c1-300
