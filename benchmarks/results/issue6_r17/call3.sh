# Issue 6, round 17 (session 22), after call1.sh (H100). 1. The decode's new default splits (default_num_splits:
# down to one key block a split to fill a wave) against the former default, in the same run: 1 x 8 heads x 8K
# (now 128 splits, was 32) and x 1K (now 16, was 4); and the 64-head decode at 8K on the Mosaic kernel (its
# default 32 splits, against 64 and 128). 2. call1's MoE rows that its time budget cut: 2 and 6 tokens, the default
# against the down kernel's K steps of 512 and rank_in_kernel, the default last again.
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
mla() {  # name shape configs
  mkdir -p $OUT/$1
  timeout 80 env PYTHONPATH=. OUT=$OUT/$1 python3 benchmarks/kernels.py --only mla --mla-shapes "$2" \
    --mla-configs "$3" --budget 60 > $OUT/$1.log 2>&1
  grep -E "copy|mla B=" $OUT/$1.log | cut -c1-900
}
mla mla8k "1,1,8,8192" '[{"num_splits": 32}]'
mla mla1k "1,1,8,1024" '[{"num_splits": 4}]'
mla mla64h8k "1,1,64,8192" '[{"kernel": "mosaic", "num_splits": 64}, {"kernel": "mosaic", "num_splits": 128}]'
C='[{"kernel": "default", "k_chunk": 256}, {"kernel": "gemv", "k_chunk": 256, "block_k_down": 512},
 {"kernel": "gemv", "k_chunk": 256, "rank_in_kernel": true}, {"kernel": "default", "k_chunk": 256}]'
mkdir -p $OUT/moe
timeout 280 env PYTHONPATH=. OUT=$OUT/moe python3 benchmarks/kernels.py --only moe --moe-rows 2,6 \
  --no-baselines --moe-configs "$C" --budget 250 > $OUT/moe.log 2>&1
grep -E "copy|moe M=" $OUT/moe.log | cut -c1-1200
