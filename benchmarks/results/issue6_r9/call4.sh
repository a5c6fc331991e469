# Issue 6 ninth round, GPU call 4 (session 11).
# 1. The K2.6 one-GPU slice again: until now its "pallas" path forced the Triton MLA kernel (impl "pallas") on a
#    cache of a multiple of 16, so the Mosaic kernel the model runs was never in it; now it runs the dispatch
#    (impl "auto") on a multiple-of-128 cache like the engine and records the MLA kernel per row. Then, on the CPU:
#    python3 benchmarks/k26_projection.py --refit --slice_json benchmarks/results/k26_slice_h200_r9.json
# 2. The MLA grid under the final dispatch (no sweep): one table with the XLA reference beside it.
set -x
mkdir -p $OUT/mla
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
timeout 230 env PYTHONPATH=. python3 benchmarks/k26_slice.py --budget_s 170 --reps 12 > $OUT/k26_slice.log 2>&1
tail -4 $OUT/k26_slice.log
OUT=$OUT/mla timeout 260 env PYTHONPATH=. python3 benchmarks/kernels.py --only mla --mla-no-sweep --budget 230 \
  > $OUT/mla/mla.log 2>&1
grep -E "^\|" $OUT/mla/mla.log | head -20
