# Issue 6, round 33, call 2 (if a machine comes again): the 1-token read-only bounds with the waits (round 32's
# call4.sh part), chained figure and kernel times. ~2.5 minutes.
mkdir -p $OUT; nvidia-smi --query-gpu=name --format=csv
timeout 140 env PYTHONPATH=. python3 benchmarks/speed_of_light.py --moe_tokens 1 --mla_ctx '' --moe_configs 1 \
  --moe_variants read_2,read_1,read_1_spin,read_1_flags,read_1_flags_volatile --device_span 12 \
  --out $OUT/speed_of_light.json > $OUT/sol.log 2>&1
echo "sol rc $?"; grep -E "copy|error|^\| " $OUT/sol.log | cut -c1-400
