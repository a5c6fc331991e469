# Issue 6, round 19 (session 24), call 3: the few-token gemv with l2_prefetch_down (the gate/up kernel reads each
# local pair's down expert into L2, evict-last, so that the latency-bound down kernel finds it there), against the
# dispatch's default on the same k-chunked experts (and the stored layout's default, first), at 1 and 4 tokens.
# Ran at commit 329883f; the option was removed after this run (slower at 1 and 4 tokens, RESULTS nineteenth round).
mkdir -p $OUT/moe; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
timeout 270 env PYTHONPATH=. OUT=$OUT/moe python3 benchmarks/kernels.py --only moe --moe-rows 1,4 --no-baselines \
  --moe-configs '[{"kernel": "gemv", "k_chunk": 256, "l2_prefetch_down": true}, {"kernel": "default", "k_chunk": 256}]' \
  --budget 230 > $OUT/moe.log 2>&1
grep -E "copy|moe M=" $OUT/moe.log | cut -c1-1500; tail -3 $OUT/moe.log | cut -c1-300
