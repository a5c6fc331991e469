# Issue 6, round 28 (session 33), call 2 (run twice on one warm machine: r1, r2): the one lever for 2-3 tokens that
# no round timed there, the gemv without XLA's pair compaction (compact_pairs False: no kernels before the gate/up
# kernel), with the default pair splits (N) and with one pair a program (P = 8N), next to the dispatch (pallas_gemv's
# two launches at 2-3 tokens) and the one-launch kernel (L = N). k-chunked 256 experts (the engine's layout).
mkdir -p $OUT; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
R=${R:-r1}; mkdir -p $OUT/$R
for n in 2 3; do
  G='{"kernel": "gemv", "k_chunk": 256'
  C="[{\"kernel\": \"default\", \"k_chunk\": 256}, {\"kernel\": \"gemv_pipelined\", \"k_chunk\": 256}, $G, \"compact_pairs\": false}, $G, \"compact_pairs\": false, \"pair_splits\": $((8 * n))}]"
  mkdir -p $OUT/$R/t$n; timeout 270 env PYTHONPATH=. OUT=$OUT/$R/t$n python3 benchmarks/kernels.py --only moe --moe-rows $n --no-baselines \
    --moe-configs "$C" --budget 250 > $OUT/$R/t$n.log 2>&1
  grep -E "copy|  moe M=" $OUT/$R/t$n.log | cut -c1-220
done
