# Issue 6 fourteenth round, GPU call 1: (1) benchmarks/matvec_forms.py: the K2.6 AR step's bf16 matrix-vector
# products in five forms (plain, two rows, fp32 result, weights stored [N, K], both) against the copy roofline,
# weights rotated out of L2; (2) benchmarks/k26_slice.py with its new pipelined time per row (calls enqueued back
# to back), for refitting the cost model on the device's time instead of the blocking time.
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
timeout 150 env PYTHONPATH=. python3 benchmarks/matvec_forms.py --out $OUT/matvec_forms.json > $OUT/matvec_forms.log 2>&1
grep -E "roofline|Error|error" $OUT/matvec_forms.log | cut -c1-200
timeout 300 env PYTHONPATH=. python3 benchmarks/k26_slice.py --reps 10 --xla_budgets "0,256" --budget_s 220 \
  --out $OUT/k26_slice.json > $OUT/k26_slice.log 2>&1
grep -E "pipelined|skipped|Error|wrote" $OUT/k26_slice.log | cut -c1-200
