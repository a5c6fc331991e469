# Issue 6, round 30 (session 35): the marked GPU tests of every INT4 MoE kernel after round 29's refactor of
# pallas_triton.py and the new dispatch, with this round's bit-for-bit checks of both one-launch kernels against their
# two-launch forms (test_moe_grouped_one_launch.py, test_moe_gemv_pipelined.py). The card is named in gpu.txt.
mkdir -p $OUT; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
timeout 570 env PYTHONPATH=. python3 -m pytest -q -rA -m gpu tests/test_moe_grouped_one_launch.py \
  tests/test_moe_gemv_pipelined.py tests/test_kernels_moe.py tests/test_moe_k_chunks.py tests/test_bf16_planes.py \
  --durations=0 > $OUT/pytest.log 2>&1
echo "pytest rc $?"; grep -E "passed|failed|FAILED|ERROR|Mismatch|Max abs" $OUT/pytest.log | tail -30 | cut -c1-300
