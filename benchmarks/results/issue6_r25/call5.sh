# Issue 6, round 25 (session 30), call 5: call 4 found the two-launch read at 0.78-0.79 of the roofline at 6-8
# tokens, against the dispatch's 0.54-0.60: there the gap is the kernels' own work. This times the few-token gemv's
# visit orders at 6 and 8 tokens on the stored layout (as call 4's reads), after the dispatch (which kernels.py
# puts first): its default (pairs compacted by XLA, split `tokens` ways), every program looping over all pairs in
# token order (pair_splits 1, the read kernels' order), and one pair a program with no compaction.
mkdir -p $OUT; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
for m in 8 6; do
  mkdir -p $OUT/moe$m
  C="[{\"kernel\": \"gemv\"}, {\"kernel\": \"gemv\", \"pair_splits\": 1, \"unroll_pairs\": false}, {\"kernel\": \"gemv\", \"pair_splits\": $((8 * m)), \"compact_pairs\": false}]"
  timeout 100 env PYTHONPATH=. OUT=$OUT/moe$m python3 benchmarks/kernels.py --only moe --moe-rows $m --no-baselines \
    --moe-configs "$C" --budget 90 > $OUT/moe$m.log 2>&1
  grep -E "copy|  moe M=" $OUT/moe$m.log | cut -c1-300
done
