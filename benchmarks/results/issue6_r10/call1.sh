# Issue 6 tenth round, GPU call 1: the k-chunked expert layout (custom_calls/moe_int4/k_chunks.py).
# Hypothesis: as stored, a kernel tile of BN rows x 256 inputs is BN separate 128-byte segments 3.5 KB apart
# (one DRAM page opened per 128 bytes); k-chunked (chunk 256) it is one contiguous BN x 128-byte block.
# 1. GPU tests of both kernels on k-chunked arrays (1, 64, 600 tokens, K2.6 shard).
# 2. Few tokens (1-8): dispatch (stored) vs the gemv and grouped kernels on k-chunked arrays.
# 3. 16-512 tokens: grouped kernel, stored vs k-chunked, block_n 32/64/128, separate down tiles.
set -x
mkdir -p $OUT/few $OUT/grouped
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
timeout 150 env PYTHONPATH=. python3 -m pytest -q -m gpu tests/test_kernels_moe.py -k "k_chunks" > $OUT/pytest.log 2>&1
tail -3 $OUT/pytest.log
G='"planar": true, "block_m": 16, "block_k": 256'
OUT=$OUT/few timeout 200 env PYTHONPATH=. python3 benchmarks/kernels.py --only moe --moe-rows 1,2,4,8 \
  --no-baselines --budget 180 --moe-configs "[{\"kernel\": \"gemv\", \"k_chunk\": 1024},
  {\"kernel\": \"gemv\", \"k_chunk\": 256}, {\"kernel\": \"gemv\", \"k_chunk\": 256, \"block_n\": 8, \"block_n_down\": 16},
  {\"kernel\": \"gemv\", \"k_chunk\": 256, \"block_n\": 16, \"block_n_down\": 16},
  {\"kernel\": \"gemv\", \"k_chunk\": 512, \"block_k\": 512},
  {$G, \"block_n\": 32}, {$G, \"block_n\": 32, \"k_chunk\": 256}, {$G, \"block_n\": 64, \"k_chunk\": 256}]" \
  > $OUT/few/moe.log 2>&1
grep -E "^\|" $OUT/few/moe.log | tail -6
OUT=$OUT/grouped timeout 230 env PYTHONPATH=. python3 benchmarks/kernels.py --only moe --moe-rows 16,32,64,128,512 \
  --no-baselines --budget 210 --moe-configs "[{$G, \"block_n\": 32, \"k_chunk\": 256},
  {$G, \"block_n\": 64, \"k_chunk\": 256}, {$G, \"block_n\": 128, \"k_chunk\": 256}, {$G, \"block_n\": 64},
  {$G, \"block_n\": 128}, {$G, \"block_n\": 32, \"block_n_down\": 64, \"k_chunk\": 256},
  {$G, \"block_n\": 64, \"num_stages\": 4, \"k_chunk\": 256}]" > $OUT/grouped/moe.log 2>&1
grep -E "^\|" $OUT/grouped/moe.log | tail -7
