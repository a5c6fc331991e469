# Issue 6, round 32, call 2: round 31's call5.sh (the read-only bounds of speed_of_light.py with the device time of
# one call next to the chained figure, --device_span 12), with the two new waits: read_1_flags / _volatile, where the
# last gate/up program sets 64 flags and each down program polls one (grid_sync.arrive_and_broadcast), to test
# whether the crowd of polls on the arrivals' own word is what the in-kernel wait costs (read_1_spin: 23.0 us
# against read_1's 13.5 at 1 token, H100, round 31). 1 token only (the device time left allowed no more); batch-1
# MLA decode at 32K (call 1 lost that shape's device time to a trace split, since fixed). ~4 minutes.
mkdir -p $OUT; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
timeout 330 env PYTHONPATH=. python3 benchmarks/speed_of_light.py --moe_tokens 1 --mla_ctx 32768 \
  --moe_configs 1 --moe_variants read_2,read_1,read_1_spin,read_1_flags,read_1_flags_volatile --device_span 12 \
  --out $OUT/speed_of_light.json > $OUT/sol.log 2>&1
echo "sol rc $?"; grep -E "copy|^\| " $OUT/sol.log | cut -c1-400
