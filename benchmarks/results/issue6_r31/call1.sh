# Issue 6, round 31 (session 36), call 1. (a) Round 30's prepared next_volatile.sh: the read-only one-launch bound
# with the down programs polling by volatile loads back to back (read_1_volatile), against round 30's atomic polls
# (read_1_spin), the sleeping polls (read_1_sleep) and the no-wait bound (read_1), at 1-2 tokens. (b) The one-launch
# GPU tests in their refactored form (tests/test_kernels_moe.check_one_launch_against_two, never run on a GPU), plus
# the gemv's two sleep cases round 30 left unrun (opts6: 6 tokens 200 ns; opts7: 3 tokens 1000 ns).
mkdir -p $OUT/sol $OUT/tests; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
timeout 250 env PYTHONPATH=. python3 benchmarks/speed_of_light.py --moe_tokens 1,2 --mla_ctx '' --moe_configs 1 \
  --moe_variants read_2,read_1,read_1_spin,read_1_volatile,read_1_sleep --out $OUT/sol/speed_of_light.json \
  > $OUT/sol/sol.log 2>&1
echo "sol rc $?"; grep -E "copy|moe tokens=[12] [a-z_0-9]+: [0-9]" $OUT/sol/sol.log | cut -c1-160
timeout 320 env PYTHONPATH=. python3 -m pytest -q -rA -m gpu -k "opts0 or opts6 or opts7" \
  tests/test_moe_grouped_one_launch.py tests/test_moe_gemv_pipelined.py --durations=0 > $OUT/tests/pytest.log 2>&1
echo "pytest rc $?"; grep -E "passed|failed|FAILED|ERROR|Mismatch|Max abs" $OUT/tests/pytest.log | tail -30 | cut -c1-300
