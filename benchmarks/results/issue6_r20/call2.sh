# Issue 6, round 20 (session 25), call 2: the few-token gemv with compact_pairs=False and pair_splits = 8 x tokens
# (each gate/up program one (token, expert) pair, remote ones ending at once; no XLA compaction and argsort before
# the gate/up kernel) against the dispatch's default (pairs compacted by XLA, split `tokens` ways) on the same
# k-chunked experts, at 2, 4 and 6 tokens (one kernels.py run per token count: pair_splits differs).
mkdir -p $OUT; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
for m in 2 4 6; do
  mkdir -p $OUT/moe$m
  timeout 175 env PYTHONPATH=. OUT=$OUT/moe$m python3 benchmarks/kernels.py --only moe --moe-rows $m --no-baselines \
    --moe-configs "[{\"kernel\": \"default\", \"k_chunk\": 256}, {\"kernel\": \"gemv\", \"k_chunk\": 256, \"pair_splits\": $((8 * m)), \"compact_pairs\": false}]" \
    --budget 165 > $OUT/moe$m.log 2>&1
  grep -E "copy|  moe M=" $OUT/moe$m.log | cut -c1-400
done
