# Issue 6 fifteenth round, GPU call 4: call 3 found the gemv with unrolled pairs and 4 warps 7-10% faster at 1-6
# tokens (22.2 / 35.8 / 62.2 / 87.8 us against the default's 24.0-24.3 / 39.8-40.1 / 68.2-69.0 / 94.3-94.5).
# Which part does it, and its neighbours: 4 warps without the unrolling, with prefetch 1 at every token count,
# with gate/up tiles of 8, 2 warps; at 1-8 tokens (8: against the grouped kernels the dispatch runs there).
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
C='[{"kernel": "default", "k_chunk": 256}, {"kernel": "gemv", "k_chunk": 256, "unroll_pairs": true, "num_warps": 4},
 {"kernel": "gemv", "k_chunk": 256, "num_warps": 4},
 {"kernel": "gemv", "k_chunk": 256, "unroll_pairs": true, "num_warps": 4, "prefetch": 1},
 {"kernel": "gemv", "k_chunk": 256, "unroll_pairs": true, "num_warps": 4, "block_n": 8},
 {"kernel": "gemv", "k_chunk": 256, "unroll_pairs": true, "num_warps": 2}]'
mkdir -p $OUT/moe
timeout 420 env PYTHONPATH=. OUT=$OUT/moe python3 benchmarks/kernels.py --only moe --moe-rows 1,2,4,6,8 \
  --no-baselines --moe-configs "$C" --budget 400 > $OUT/moe.log 2>&1
grep -E "copy|moe M=" $OUT/moe.log | cut -c1-1200
