# Issue 6 fourteenth round, GPU call 2: the K2.6 slice (kernel path, 1 dense + 3 MoE layers) in three weight
# layouts (k26_slice.py LAYOUTS: kn = the model's today; nk = q_b, o_proj and the shared expert's gate/up stored
# [out, in], gate+up one product; nk_qkv = nk with q_a and kv_a one product), AR and trees of 8 and 64 nodes at 4K,
# blocking and pipelined time per call.
set -x
timeout 280 env PYTHONPATH=. python3 benchmarks/k26_slice.py --impls pallas --layouts kn,nk,nk_qkv --budgets "8,64" \
  --contexts 4096 --reps 20 --budget_s 230 --out $OUT/k26_slice_layouts.json > $OUT/k26_slice_layouts.log 2>&1
grep -E "pipelined|skipped|Error|wrote" $OUT/k26_slice_layouts.log | cut -c1-200
