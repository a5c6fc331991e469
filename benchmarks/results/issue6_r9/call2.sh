# Issue 6 ninth round, GPU call 2 (run 2026-12-04 03:20 UTC; results in call2/).
# 1. The K2.6 one-GPU slice with the fixed Mosaic kernel, for the cost model
#    (then: python3 benchmarks/k26_projection.py --refit --slice_json <this k26_slice.json>).
# 2. Few-token INT4 MoE (1-16 tokens, 0.33-0.58 of the roofline in round 6): the dispatch against deeper
#    pipelines and smaller K steps (more loads in flight per SM; the gemv streams at 1.2-1.7 TB/s there).
set -x
mkdir -p $OUT/moe
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
timeout 200 env PYTHONPATH=. python3 benchmarks/k26_slice.py --budget_s 150 --reps 12 > $OUT/k26_slice.log 2>&1
tail -5 $OUT/k26_slice.log
OUT=$OUT/moe timeout 330 env PYTHONPATH=. python3 benchmarks/kernels.py --only moe --moe-rows 1,2,4,8,16 \
  --no-baselines --budget 300 --moe-configs '[{"kernel": "gemv", "num_stages": 3}, {"kernel": "gemv", "num_stages": 4},
  {"kernel": "gemv", "block_k": 512, "num_stages": 4}, {"kernel": "gemv", "block_n": 2, "num_warps": 4}]' \
  > $OUT/moe/moe.log 2>&1
grep -E "^\[|^\|" $OUT/moe/moe.log | tail -10
