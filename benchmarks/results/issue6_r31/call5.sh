# Issue 6, round 31, call 5: PREPARED, NOT RUN. The read-only bounds of speed_of_light.py (two launches, one launch
# without and with the wait; the MLA cache read with and without the split combine) with the device time of one
# call next to the chained figure (--device_span 12), at 1-2 tokens and batch-1 decode 8K / 32K. ~4 minutes.
mkdir -p $OUT; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
timeout 330 env PYTHONPATH=. python3 benchmarks/speed_of_light.py --moe_tokens 1,2 --mla_ctx 8192,32768 \
  --moe_configs 1 --moe_variants read_2,read_1,read_1_spin --device_span 12 --out $OUT/speed_of_light.json \
  > $OUT/sol.log 2>&1
echo "sol rc $?"; grep -E "copy|^\| " $OUT/sol.log | cut -c1-400
