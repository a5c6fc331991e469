# Issue 6, round 18 (session 23), call 2 (NVIDIA H100, nvidia-h100-x1): call1.sh narrowed to one token and two
# variants, so that the row ends inside the timeout: the few-token gemv's down kernel with its whole K (I = 2048) in
# one step (block_k_down 2048), with down tiles of 8 and 16 columns, between the dispatch's default (first, last).
mkdir -p $OUT/moe; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
timeout 250 env PYTHONPATH=. OUT=$OUT/moe python3 benchmarks/kernels.py --only moe --moe-rows 1 --no-baselines \
  --moe-configs '[{"kernel": "gemv", "k_chunk": 256, "block_k_down": 2048}, {"kernel": "gemv", "k_chunk": 256, "block_k_down": 2048, "block_n_down": 16}, {"kernel": "default", "k_chunk": 256}]' \
  --budget 200 > $OUT/moe.log 2>&1
grep -E "copy|moe M=" $OUT/moe.log | cut -c1-1500; tail -3 $OUT/moe.log | cut -c1-300
