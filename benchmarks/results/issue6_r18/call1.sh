# RAN on an H100 (nvidia-h100-x1, session 23) and was CUT by its timeout: 7 configs of one row took longer than
# 280 s (compile and check ~40 s a config), and the budget is checked only between rows, so nothing was printed.
# call2.sh is the same question, narrowed to what fits.
# Issue 6, round 18 (session 23). The few-token gemv's down kernel with its whole K (I = 2048) in one step: at
# one token it streams 8.3 MB at ~0.67 TB/s (round 15's ncu: its stalls wait on loads, one K step of 1024 at a
# time, 896 programs of 8 columns). One step issues all of a program's word loads at once. Rows 1 and 2, the
# default first and last, against block_k_down 2048 with down tiles of 8 and 16, and with 8 warps.
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
C='[{"kernel": "default", "k_chunk": 256}, {"kernel": "gemv", "k_chunk": 256, "block_k_down": 2048},
 {"kernel": "gemv", "k_chunk": 256, "block_k_down": 2048, "block_n_down": 16},
 {"kernel": "gemv", "k_chunk": 256, "block_k_down": 2048, "num_warps_down": 8},
 {"kernel": "gemv", "k_chunk": 256, "block_k_down": 2048, "block_n_down": 4},
 {"kernel": "default", "k_chunk": 256}]'
mkdir -p $OUT/moe
timeout 280 env PYTHONPATH=. OUT=$OUT/moe python3 benchmarks/kernels.py --only moe --moe-rows 1,2 \
  --no-baselines --moe-configs "$C" --budget 250 > $OUT/moe.log 2>&1
grep -E "copy|moe M=" $OUT/moe.log | cut -c1-1500
