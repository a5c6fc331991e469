# Issue 6, round 17 (session 22): the K2.6 one-GPU slice (round 16 call3.sh, unchanged) with the kernels as
# dispatched after call1.sh, for refitting the cost model. Afterwards, here:
#   cp <files_at>/k26_slice.json benchmarks/results/k26_slice_h200_r17.json
#   python benchmarks/k26_projection.py --refit --slice_json benchmarks/results/k26_slice_h200_r17.json
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
timeout 300 env PYTHONPATH=. python3 benchmarks/k26_slice.py --reps 10 --xla_budgets "0,256" --budget_s 220 \
  --out $OUT/k26_slice.json > $OUT/k26_slice.log 2>&1
grep -E "pipelined|skipped|Error|wrote" $OUT/k26_slice.log | cut -c1-200
