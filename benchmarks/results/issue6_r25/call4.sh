# Issue 6, round 25 (session 30), call 4: the MoE speed of light at 4-10 tokens (calls 1-3 covered 1-2 tokens and the
# 8K / 32K decode). The read kernels visit the pairs in loops above 8 pairs (UNROLL_MAX_PAIRS); the dispatch runs
# what its defaults choose (the gemv up to 6 tokens, the grouped kernels above: GEMV_MAX_TOKENS). Two read variants only: the
# in-kernel wait was the slowest at 1-2 tokens.
mkdir -p $OUT; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
timeout 330 env PYTHONPATH=. python3 benchmarks/speed_of_light.py --moe_tokens 4,6,8,10 --moe_configs 1 \
  --moe_variants read_2,read_1 --mla_ctx "" --out $OUT/speed_of_light.json > $OUT/sol.log 2>&1
echo "rc $?"; grep -E "copy|moe|^\|" $OUT/sol.log | cut -c1-400 | tail -40
