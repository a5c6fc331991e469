# Issue 6 tenth round, GPU call 4: the K2.6 one-GPU slice with the experts k-chunked as the engine now lays them
# out on a GPU (benchmarks/k26_slice.py kernel_layout_params), for the cost model
# (then: python3 benchmarks/k26_projection.py --refit --slice_json <this k26_slice.json>).
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
timeout 240 env PYTHONPATH=. python3 benchmarks/k26_slice.py --budget_s 180 --reps 12 > $OUT/k26_slice.log 2>&1
tail -25 $OUT/k26_slice.log
