# Issue 6, round 30 (session 35): does a sleeping wait make one launch pay at 1-2 tokens? Round 25 measured a
# read-only launch whose down programs wait on a counter (read_1_spin) SLOWER than two launches (23.1 against 16.6 us
# at 1 token, H100), and round 27's one-launch gemv lost at 1 token (35.0 against 20.7). Each of those polls is an
# acquire-release atomic with MEMBAR.ALL.GPU before it and CCTL.IVALL (the SM's whole L1 invalidated) after it, back
# to back, on SMs where gate/up programs run. grid_sync.counter_wait(sleep_ns > 0) polls with volatile loads and a
# nanosleep between them, and acquires once at the end.
# 1) speed_of_light: read_2 / read_1 / read_1_spin / read_1_sleep at 1 and 2 tokens (first read config only);
# 2) kernels.py at 1 token: the dispatch (two launches) against the one-launch gemv with atomic polls and with sleeps;
# 3) kernels.py at 8 and 16 tokens: the grouped one-launch kernel (the dispatch there) with atomic polls and sleeps.
mkdir -p $OUT/k1 $OUT/k8; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
timeout 200 env PYTHONPATH=. python3 benchmarks/speed_of_light.py --moe_tokens 1,2 --mla_ctx '' --moe_configs 1 \
  --moe_variants read_2,read_1,read_1_spin,read_1_sleep --out $OUT/speed_of_light.json > $OUT/sol.log 2>&1
echo "sol rc $?"; grep -E "copy|moe tokens=[12] [a-z_0-9]+: [0-9]" $OUT/sol.log | cut -c1-160
P='{"kernel": "gemv_pipelined", "k_chunk": 256'
timeout 200 env PYTHONPATH=. OUT=$OUT/k1 python3 benchmarks/kernels.py --only moe --moe-rows 1 --no-baselines \
  --moe-configs "[{\"kernel\": \"default\", \"k_chunk\": 256}, $P, \"wait_sleep_ns\": 200}, $P}, $P, \"wait_sleep_ns\": 1000}]" \
  --budget 185 > $OUT/k1.log 2>&1
echo "k1 rc $?"; grep -E "copy|  moe M=" $OUT/k1.log | cut -c1-220
G='{"kernel": "grouped_one_launch", "k_chunk": 256'
timeout 150 env PYTHONPATH=. OUT=$OUT/k8 python3 benchmarks/kernels.py --only moe --moe-rows 8,16 --no-baselines \
  --moe-configs "[{\"kernel\": \"default\", \"k_chunk\": 256}, $G, \"wait_sleep_ns\": 200}, $G, \"wait_sleep_ns\": 1000}]" \
  --budget 135 > $OUT/k8.log 2>&1
echo "k8 rc $?"; grep -E "copy|  moe M=" $OUT/k8.log | cut -c1-220
