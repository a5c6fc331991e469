# Issue 6 tenth round, GPU call 2: which chunk size for the model's single k-chunked layout.
# Call 1: grouped kernel, block_n 128 on chunk 256: 0.90-1.02 of the roofline at 16-512 tokens (stored layout,
# same tile: 0.82-0.95); the gemv (1-6 tokens) needs its 1024-input K step, i.e. chunk >= 1024, and loses
# 2-2.5x on chunk 256. Here: the grouped kernel on chunk 256 / 512 / 1024, block_n 128 / 256, a wider down
# tile; the gemv on chunk 1024 again at 1-4 tokens; the large-row shapes (1024, 4096) on chunks.
set -x
mkdir -p $OUT/grouped $OUT/few $OUT/large
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
G='"planar": true, "block_m": 16, "block_k": 256'
OUT=$OUT/grouped timeout 230 env PYTHONPATH=. python3 benchmarks/kernels.py --only moe --moe-rows 8,16,32,64,128,512 \
  --no-baselines --budget 210 --moe-configs "[{$G, \"block_n\": 128, \"k_chunk\": 256},
  {$G, \"block_n\": 128, \"k_chunk\": 1024}, {$G, \"block_n\": 128, \"k_chunk\": 512},
  {$G, \"block_n\": 256, \"k_chunk\": 256}, {$G, \"block_n\": 128, \"block_n_down\": 256, \"k_chunk\": 256},
  {$G, \"block_n\": 64, \"k_chunk\": 1024}]" > $OUT/grouped/moe.log 2>&1
grep -E "^\|" $OUT/grouped/moe.log | tail -6
OUT=$OUT/few timeout 90 env PYTHONPATH=. python3 benchmarks/kernels.py --only moe --moe-rows 1,2,4 \
  --no-baselines --budget 80 --moe-configs '[{"kernel": "gemv"}, {"kernel": "gemv", "k_chunk": 1024}]' \
  > $OUT/few/moe.log 2>&1
grep -E "^\|" $OUT/few/moe.log | tail -3
L='"planar": true, "block_n": 128'
OUT=$OUT/large timeout 150 env PYTHONPATH=. python3 benchmarks/kernels.py --only moe --moe-rows 1024,4096 \
  --no-baselines --budget 140 --moe-configs "[{$L, \"block_m\": 32, \"block_k\": 256, \"k_chunk\": 256},
  {$L, \"block_m\": 32, \"block_k\": 256, \"k_chunk\": 1024}, {$L, \"block_m\": 64, \"block_k\": 128, \"k_chunk\": 256},
  {$L, \"block_m\": 64, \"block_k\": 128, \"k_chunk\": 1024}]" > $OUT/large/moe.log 2>&1
grep -E "^\|" $OUT/large/moe.log | tail -2
