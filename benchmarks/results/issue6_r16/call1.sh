# Issue 6, prepared in session 17 for the next GPU session (NOT RUN: the device time ran out). The few-token gemv's
# down kernel on its own K step and warps (routed_experts_int4_gemv(block_k_down=, num_warps_down=)). With round 15's
# 4 warps its SASS takes 96 registers a thread (benchmarks/sass_report.py, Triton 3.6.0, without a GPU): 5 programs
# a SM, 660 resident against its 896 at one token, so a second wave. K steps of 512: 47 registers (10 a SM, one
# wave); of 256: 32; 512 with tiles of 16 columns (448 programs): 72; tiles of 4 (1792 programs): 56. At 1-6 tokens
# on the k-chunked layout, the default first and last (the run's spread). If one wins, set it in default_gemv_blocks.
# Also rank_in_kernel at 2-6 tokens (each gate/up program ranks the local pairs itself: no XLA compaction and argsort
# before it, round 11's ncu 2.2 + 2.7 us at 2 tokens; SASS: 61 / 71 registers at 2 / 6 tokens against 58). It
# does not apply at one token (token order, no order array): that row records its ValueError.
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
C='[{"kernel": "default", "k_chunk": 256}, {"kernel": "gemv", "k_chunk": 256, "block_k_down": 512},
 {"kernel": "gemv", "k_chunk": 256, "block_k_down": 256},
 {"kernel": "gemv", "k_chunk": 256, "block_k_down": 512, "block_n_down": 16},
 {"kernel": "gemv", "k_chunk": 256, "block_n_down": 4}, {"kernel": "gemv", "k_chunk": 256, "num_warps_down": 8},
 {"kernel": "gemv", "k_chunk": 256, "rank_in_kernel": true}, {"kernel": "default", "k_chunk": 256}]'
mkdir -p $OUT/moe
timeout 450 env PYTHONPATH=. OUT=$OUT/moe python3 benchmarks/kernels.py --only moe --moe-rows 1,2,4,6 \
  --no-baselines --moe-configs "$C" --budget 430 > $OUT/moe.log 2>&1
grep -E "copy|moe M=" $OUT/moe.log | cut -c1-1200
