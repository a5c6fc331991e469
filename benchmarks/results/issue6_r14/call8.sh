# Issue 6 fourteenth round, GPU call 8: the drafter's top-K over the vocabulary (call 7: XLA's sort for [1, 15, 4096],
# K = 32, 32 us of a 0.71-ms DDTree round): lax.top_k against ddtree_jax/topk.py's two stages per chunk size, at the
# embedded model's vocabulary, a K2.6 vocabulary shard and the full K2.6 vocabulary (benchmarks/topk_forms.py).
set -x
timeout 240 env PYTHONPATH=. python3 benchmarks/topk_forms.py --out $OUT/topk_forms.json > $OUT/topk_forms.log 2>&1
grep -E "k [0-9]|Error" $OUT/topk_forms.log | cut -c12-250
