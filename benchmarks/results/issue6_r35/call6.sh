# Issue 6, round 35, call 6 (for the next session, after call5.sh; timeout 480). 1. Batch-1 decode variants of the MLA
# Triton kernel never timed at 8K-32K (round 17's and the built-in sweep's decode configs there are all 64-key
# blocks): at 8K each of the default 128 programs loads one 64-key block and then computes, with nothing to overlap;
# 32-key blocks give two steps a program, so that num_stages can load the second while the first is in the dots.
# Kernel times (--device-span 12), the dispatch first.
# 2. The one-launch kernel at 3 tokens (k-chunked 256) against the dispatch's two launches: round 28 measured it
# at 44.6 and 51.3 us in two runs (the dispatch ~49), when it still needed a 1.1-us copy of its counters, which
# planes_consts removed; with the atomic polls and with the 64 flags.
mkdir -p $OUT/dec $OUT/three; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv | tee $OUT/gpu.txt
timeout 280 env PYTHONPATH=. OUT=$OUT/dec python3 benchmarks/kernels.py --only mla --budget 260 --device-span 12 \
  --mla-shapes "1,1,8,8192;1,1,8,32768;1,1,8,1024" \
  --mla-configs '[{"block_k": 32}, {"block_k": 32, "num_splits": 128}, {"block_k": 32, "num_stages": 3},
                  {"block_k": 32, "num_splits": 256}, {"num_warps": 8}, {"num_warps": 2}, {"block_k": 16}]' \
  > $OUT/dec.log 2>&1
echo "dec rc $?"; grep -E "copy|mla B=" $OUT/dec.log | cut -c1-1500
timeout 180 env PYTHONPATH=. OUT=$OUT/three python3 benchmarks/kernels.py --only moe --no-baselines --device-span 12 \
  --moe-rows 3 --budget 160 --moe-configs '[{"kernel": "default", "k_chunk": 256},
  {"kernel": "gemv_pipelined", "k_chunk": 256}, {"kernel": "gemv_pipelined", "k_chunk": 256, "wait_flags": 64}]' \
  > $OUT/three.log 2>&1
echo "three rc $?"; grep -E "copy|  moe M=" $OUT/three.log | cut -c1-300
