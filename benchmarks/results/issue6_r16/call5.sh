# Issue 6, prepared in session 18 (no GPU was lent that session; NOT RUN). Run after call4.sh, and only if its GPU
# tests pass. The K2.6 slice (1 dense + 3 MoE layers at the real per-GPU shapes) with the routed experts on the
# Mosaic GPU kernels (impl mosaic_moe: the dispatch's attention, custom_calls/moe_int4/mosaic_experts.py for the
# experts, up to 16 tokens) against the model's dispatch (impl pallas), AR and trees of 1, 8 and 15 nodes, at 4K:
# what the kernels' difference is worth per layer. Two runs, the kernel's defaults and wgmma_order. If call4 found
# better options, put them in M1 / M2 first.
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
M1='{}'
M2='{"wgmma_order": true}'
timeout 280 env PYTHONPATH=. python3 benchmarks/k26_slice.py --impls pallas,mosaic_moe --budgets 1,8,15 \
  --contexts 4096 --mosaic_moe_opts "$M1" --budget_s 240 --reps 12 --out $OUT/slice_default.json > $OUT/slice_default.log 2>&1
timeout 280 env PYTHONPATH=. python3 benchmarks/k26_slice.py --impls mosaic_moe --budgets 1,8,15 \
  --contexts 4096 --mosaic_moe_opts "$M2" --budget_s 240 --reps 12 --out $OUT/slice_order.json > $OUT/slice_order.log 2>&1
grep -E "ceilings|ctx" $OUT/slice_default.log $OUT/slice_order.log | cut -c1-220
