# Issue 6, round 30 (session 35), from round 29's next_few_tokens.sh. At 4-6 tokens (still under 0.75) the grouped one-launch
# kernel with other tiles, against the dispatch there (the one-launch gemv; ~45 s of compile per token count and
# layout), k-chunked 256. Round 29 timed it only with default_blocks' tiles at 6 tokens (83.1 us against 82.4).
mkdir -p $OUT/t; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
G='{"kernel": "grouped_one_launch", "k_chunk": 256'
C="[{\"kernel\": \"default\", \"k_chunk\": 256}, $G}, $G, \"block_n\": 64, \"block_n_down\": 64}, \
$G, \"block_n\": 32, \"block_n_down\": 128}, $G, \"block_n\": 16, \"block_n_down\": 32}]"
timeout 540 env PYTHONPATH=. OUT=$OUT/t python3 benchmarks/kernels.py --only moe --moe-rows 6,4,5 --no-baselines \
  --moe-configs "$C" --budget 520 > $OUT/t.log 2>&1
echo "kernels rc $?"; grep -E "copy|  moe M=" $OUT/t.log | cut -c1-220
