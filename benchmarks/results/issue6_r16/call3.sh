# Issue 6, prepared in session 17 for the next GPU session (NOT RUN). The K2.6 one-GPU slice with the gemv's
# round-15 defaults (4 warps, unrolled pairs at 1-6 tokens: the AR step's MoE ~3 us a layer faster in kernels.py,
# not yet seen in the slice), for refitting the cost model (configs/cost_h200.json was fitted on
# benchmarks/results/k26_slice_h200_r14.json). Afterwards, here:
#   cp <files_at>/k26_slice.json benchmarks/results/k26_slice_h200_r16.json
#   python benchmarks/k26_projection.py --refit --slice_json benchmarks/results/k26_slice_h200_r16.json
# Run after call 1 (and after setting its winners as defaults), so that the slice times the final kernels.
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
timeout 300 env PYTHONPATH=. python3 benchmarks/k26_slice.py --reps 10 --xla_budgets "0,256" --budget_s 220 \
  --out $OUT/k26_slice.json > $OUT/k26_slice.log 2>&1
grep -E "pipelined|skipped|Error|wrote" $OUT/k26_slice.log | cut -c1-200
