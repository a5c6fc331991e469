# Issue 6, round 30: prepared for the next session, NOT RUN. Round 30 found the sleeping wait (volatile polls with a
# nanosleep between them) SLOWER than atomic polls (read_1_sleep 30.0 against read_1_spin 21.6 us at 1 token, H100).
# This separates its two changes: read_1_volatile polls with volatile loads back to back (no fence, no L1
# invalidation, no sleep). If it comes near read_1 (13.6 us at 1 token), the next step is a kernel option for it
# (grid_sync.counter_wait's poll="volatile" through both one-launch kernels) and the one-launch gemv at 1-6 tokens.
# ~2-3 minutes on an H100.
mkdir -p $OUT; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
timeout 300 env PYTHONPATH=. python3 benchmarks/speed_of_light.py --moe_tokens 1,2 --mla_ctx '' --moe_configs 1 \
  --moe_variants read_2,read_1,read_1_spin,read_1_volatile,read_1_sleep --out $OUT/speed_of_light.json \
  > $OUT/sol.log 2>&1
echo "sol rc $?"; grep -E "copy|moe tokens=[12] [a-z_0-9]+: [0-9]" $OUT/sol.log | cut -c1-160
