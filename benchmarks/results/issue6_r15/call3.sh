# Issue 6 fifteenth round, GPU call 3: call 2's unrolled pair loops failed to lower (the Triton lowering has no
# unrolled fori_loop; now a Python loop, and a lowering test). Call 2's ncu of the one-token gemv: the down kernel
# runs 896 programs against 792 resident (6 a SM at 40 registers: a 104-program second wave), 0.67 TB/s, 66% of
# its stalls waiting on L1TEX; the gate/up kernel issues 0.63 instructions a cycle per scheduler (~6.4 a weight).
# Timed here at 1-6 tokens on the k-chunked layout: unrolled pairs, down tiles of 16 (448 programs, one wave),
# both, 4 warps; the default first and last (the run's spread).
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
C='[{"kernel": "default", "k_chunk": 256}, {"kernel": "gemv", "k_chunk": 256, "unroll_pairs": true},
 {"kernel": "gemv", "k_chunk": 256, "block_n_down": 16}, {"kernel": "gemv", "k_chunk": 256, "unroll_pairs": true, "block_n_down": 16},
 {"kernel": "gemv", "k_chunk": 256, "unroll_pairs": true, "num_warps": 4}, {"kernel": "default", "k_chunk": 256}]'
mkdir -p $OUT/moe
timeout 300 env PYTHONPATH=. OUT=$OUT/moe python3 benchmarks/kernels.py --only moe --moe-rows 1,2,4,6 \
  --no-baselines --moe-configs "$C" --budget 280 > $OUT/moe.log 2>&1
grep -E "copy|moe M=" $OUT/moe.log | cut -c1-900
