# Issue 6, prepared in session 17 for the next GPU session (NOT RUN). The 8-head decode (Triton kernel) at 8K and
# 32K, where the fixed cost dominates: default_num_splits keeps at least 4 key blocks of 64 in a split, so 8K runs
# 32 programs (a quarter of the SMs) of 4 blocks each, 32K 128 programs. Fewer blocks per split (more programs,
# a shorter serial chain of DRAM round trips per program, a larger combine) were swept only at 128K and before the
# queued timing (round 6). Timed here: 8K at 64 / 128 splits (2 / 1 blocks), 32K at 256 / 512, and key blocks of
# 32 with 3 stages (twice the blocks, half the shared memory per stage); the dispatch first (its default).
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
mkdir -p $OUT/mla8k $OUT/mla32k
timeout 200 env PYTHONPATH=. OUT=$OUT/mla8k python3 benchmarks/kernels.py --only mla --mla-shapes "1,1,8,8192" \
  --mla-configs '[{"num_splits": 64}, {"num_splits": 128}, {"num_splits": 64, "block_k": 32, "num_stages": 3},
  {"num_splits": 128, "block_k": 32, "num_stages": 3}]' --budget 180 > $OUT/mla8k.log 2>&1
grep -E "copy|mla B=" $OUT/mla8k.log | cut -c1-900
timeout 200 env PYTHONPATH=. OUT=$OUT/mla32k python3 benchmarks/kernels.py --only mla --mla-shapes "1,1,8,32768" \
  --mla-configs '[{"num_splits": 256}, {"num_splits": 512}, {"num_splits": 256, "block_k": 32, "num_stages": 3},
  {"num_splits": 512, "block_k": 32, "num_stages": 3}]' --budget 180 > $OUT/mla32k.log 2>&1
grep -E "copy|mla B=" $OUT/mla32k.log | cut -c1-900
