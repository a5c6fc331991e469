# Issue 6 fourteenth round, GPU call 3: call 2 again with the same tree and routing for every layout of a (ctx, T)
# (call 2 drew them one after another, so its layouts saw different numbers of local experts), 30 reps.
set -x
timeout 280 env PYTHONPATH=. python3 benchmarks/k26_slice.py --impls pallas --layouts kn,nk,nk_qkv --budgets "8,64" \
  --contexts 4096 --reps 30 --budget_s 230 --out $OUT/k26_slice_layouts.json > $OUT/k26_slice_layouts.log 2>&1
grep -E "pipelined|skipped|Error|wrote" $OUT/k26_slice_layouts.log | cut -c1-200
