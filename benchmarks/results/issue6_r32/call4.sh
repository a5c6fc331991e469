# Issue 6, round 32, call 4 (PREPARED, NOT RUN: the session's device time ran out). After the fix (the flags set by
# an atomic exchange; Pallas lowered the int32 vector add as a float add): flags_debug.py (counter and flags after one
# launch, NaN outputs), then the 1-token read-only bounds with the waits (chained figure and kernel times), then the
# dispatch at 1 and 4 tokens against the one-launch gemv with the flag wait (wait_flags 64; at 1 token one launch
# instead of the dispatch's two), and batch-1 decode at 8K / 32K, with the kernel times of blocking AND queued calls
# (kernels.py --device-span: device_busy_s and device_busy_queued_s side by side). ~9 minutes (each part has its
# own timeout; 560 s in all). Run with the run tool's timeout_s 600.
mkdir -p $OUT; nvidia-smi --query-gpu=name --format=csv   # (8 files come back at most: 8 are written below)
timeout 60 env PYTHONPATH=. python3 benchmarks/results/issue6_r32/flags_debug.py 2>&1 | grep -E "^read"
timeout 140 env PYTHONPATH=. python3 benchmarks/speed_of_light.py --moe_tokens 1 --mla_ctx '' --moe_configs 1 \
  --moe_variants read_2,read_1,read_1_spin,read_1_flags,read_1_flags_volatile --device_span 12 \
  --out $OUT/speed_of_light.json > $OUT/sol.log 2>&1
echo "sol rc $?"; grep -E "copy|error|^\| " $OUT/sol.log | cut -c1-400
mkdir -p $OUT/moe $OUT/mla
timeout 250 env PYTHONPATH=. OUT=$OUT/moe python3 benchmarks/kernels.py --only moe --no-baselines --device-span 12 \
  --moe-rows 1,4 --moe-configs '[{"kernel": "default", "k_chunk": 256},
    {"kernel": "gemv_pipelined", "k_chunk": 256, "wait_flags": 64}]' --budget 230 > $OUT/moe.log 2>&1
echo "moe rc $?"; grep -E "copy|  moe M=" $OUT/moe.log | cut -c1-300
timeout 110 env PYTHONPATH=. OUT=$OUT/mla python3 benchmarks/kernels.py --only mla --mla-no-sweep --device-span 12 \
  --budget 90 --mla-shapes "1,1,8,32768;1,1,8,8192" > $OUT/mla.log 2>&1
echo "mla rc $?"; grep -E "copy|^\| 1 \| 1 \|" $OUT/mla.log | cut -c1-300
