# Issue 6, round 25 (session 30), call 1: the speed of light of the few-token shapes in the dispatch's own harness.
# benchmarks/speed_of_light.py times, next to the dispatch, kernels that only read the roofline's bytes: the INT4 MoE
# as two dependent launches (the gemv's structure), as one launch, and as one launch whose down programs read their
# rows, then wait on a counter for the gate/up programs (the "down weights load during gate/up" design); the batch-1
# MLA decode as one launch over the dispatch's splits, with and without the split combine; XLA reductions of the
# same bytes. One token first (every read config), then 8K / 32K decode, then 2 and 4 tokens.
mkdir -p $OUT; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
timeout 540 env PYTHONPATH=. python3 benchmarks/speed_of_light.py --moe_tokens 1,2,4 --mla_ctx 8192,32768 \
  --out $OUT/speed_of_light.json > $OUT/sol.log 2>&1
echo "rc $?"; grep -v "^\s*$" $OUT/sol.log | grep -E "copy|moe|mla|^\|" | cut -c1-400 | tail -60
