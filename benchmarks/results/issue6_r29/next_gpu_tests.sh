# Issue 6, round 29: prepared for the next session, NOT RUN. The marked GPU tests of every INT4 MoE kernel after round
# 29's refactor of pallas_triton.py (kernel bodies as functions, options in grouped_options) and the new dispatch
# (the grouped kernels in one launch at 7-512 tokens). Round 29 ran only the new kernel's tests and the end-to-end
# test on a GPU. ~4-5 minutes on an H100 (compiles at the K2.6 shard's shapes).
mkdir -p $OUT; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
timeout 560 env PYTHONPATH=. python3 -m pytest -q -rA -m gpu tests/test_kernels_moe.py tests/test_moe_k_chunks.py \
  tests/test_moe_grouped_one_launch.py tests/test_bf16_planes.py --durations=0 > $OUT/pytest.log 2>&1
echo "pytest rc $?"; grep -E "passed|failed|FAILED|ERROR" $OUT/pytest.log | tail -20 | cut -c1-300
