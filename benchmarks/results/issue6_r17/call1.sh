# Issue 6, round 17 (session 22): round 16's call1.sh and call2.sh in one device call (GPU starts were scarce this
# session, each failed one costing ~90 s of device time), with shorter budgets. What each part times and why:
#  1. the few-token gemv's down kernel on its own K step / tiles / warps, and rank_in_kernel, at 1, 2, 4, 6 tokens on
#     the k-chunked layout, the dispatch's default first and last (the run's spread) -- see ../issue6_r16/call1.sh;
#  2. the 8-head decode at 8K and 32K with fewer key blocks per split (more programs) and key blocks of 32 -- see
#     ../issue6_r16/call2.sh.
# Winners go into default_gemv_blocks / default_num_splits; call2.sh (the K2.6 slice for the cost model's refit)
# runs after that.
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
C='[{"kernel": "default", "k_chunk": 256}, {"kernel": "gemv", "k_chunk": 256, "block_k_down": 512},
 {"kernel": "gemv", "k_chunk": 256, "block_k_down": 256},
 {"kernel": "gemv", "k_chunk": 256, "block_k_down": 512, "block_n_down": 16},
 {"kernel": "gemv", "k_chunk": 256, "block_n_down": 4}, {"kernel": "gemv", "k_chunk": 256, "num_warps_down": 8},
 {"kernel": "gemv", "k_chunk": 256, "rank_in_kernel": true}, {"kernel": "default", "k_chunk": 256}]'
mkdir -p $OUT/moe $OUT/mla8k $OUT/mla32k
timeout 310 env PYTHONPATH=. OUT=$OUT/moe python3 benchmarks/kernels.py --only moe --moe-rows 1,2,4,6 \
  --no-baselines --moe-configs "$C" --budget 290 > $OUT/moe.log 2>&1
grep -E "copy|moe M=" $OUT/moe.log | cut -c1-1200
timeout 125 env PYTHONPATH=. OUT=$OUT/mla8k python3 benchmarks/kernels.py --only mla --mla-shapes "1,1,8,8192" \
  --mla-configs '[{"num_splits": 64}, {"num_splits": 128}, {"num_splits": 64, "block_k": 32, "num_stages": 3},
  {"num_splits": 128, "block_k": 32, "num_stages": 3}]' --budget 110 > $OUT/mla8k.log 2>&1
grep -E "copy|mla B=" $OUT/mla8k.log | cut -c1-900
timeout 125 env PYTHONPATH=. OUT=$OUT/mla32k python3 benchmarks/kernels.py --only mla --mla-shapes "1,1,8,32768" \
  --mla-configs '[{"num_splits": 256}, {"num_splits": 512}, {"num_splits": 256, "block_k": 32, "num_stages": 3},
  {"num_splits": 512, "block_k": 32, "num_stages": 3}]' --budget 110 > $OUT/mla32k.log 2>&1
grep -E "copy|mla B=" $OUT/mla32k.log | cut -c1-900
