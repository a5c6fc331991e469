# Issue 6, round 32, call 4: after the fix (the flags set by an atomic exchange; Pallas lowered the int32 vector add
# as a float add): flags_debug.py (counter and flags after one launch, NaN outputs), then the 1-token read-only
# bounds with the waits, chained figure only (the device time left allowed no trace). ~2 minutes.
mkdir -p $OUT; nvidia-smi --query-gpu=name --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
timeout 60 env PYTHONPATH=. python3 benchmarks/results/issue6_r32/flags_debug.py 2>&1 | grep -E "^read" | tee $OUT/flags_debug.log
timeout 120 env PYTHONPATH=. python3 benchmarks/speed_of_light.py --moe_tokens 1 --mla_ctx '' --moe_configs 1 \
  --moe_variants read_2,read_1,read_1_spin,read_1_flags,read_1_flags_volatile --out $OUT/speed_of_light.json \
  > $OUT/sol.log 2>&1
echo "sol rc $?"; grep -E "copy|error|^\| " $OUT/sol.log | cut -c1-400
