# Issue 6, round 33, call 1: round 32's call4.sh (never run), reordered, MLA left to call 2, with the activation
# planes' forms added. flags_debug.py (the flags set by the atomic exchange; no NaN output), the dispatch at 1 and
# 4 tokens against the one-launch gemv with the flag wait (wait_flags 64), planes_forms.py (the two XLA kernels
# before the MoE kernels: can they be one?). Kernel times of blocking and queued calls (--device-span). ~7 minutes
# (run with the run tool's timeout_s 480); the read-only bounds with the waits (speed_of_light.py) left out to fit.
mkdir -p $OUT/moe; nvidia-smi --query-gpu=name --format=csv   # (8 files come back at most: 5 are written below)
R32=benchmarks/results/issue6_r32
timeout 60 env PYTHONPATH=. python3 $R32/flags_debug.py 2>&1 | grep -E "^read"
timeout 250 env PYTHONPATH=. OUT=$OUT/moe python3 benchmarks/kernels.py --only moe --no-baselines --device-span 12 \
  --moe-rows 1,4 --moe-configs '[{"kernel": "default", "k_chunk": 256},
    {"kernel": "gemv_pipelined", "k_chunk": 256, "wait_flags": 64}]' --budget 230 > $OUT/moe.log 2>&1
echo "moe rc $?"; grep -E "copy|  moe M=" $OUT/moe.log | cut -c1-300
timeout 120 env PYTHONPATH=. python3 benchmarks/planes_forms.py --tokens 1,2,4,64 --out $OUT/planes_forms.json \
  > $OUT/planes.log 2>&1
echo "planes rc $?"; grep -E "^planes|^dispatch|rror" $OUT/planes.log | cut -c1-400
