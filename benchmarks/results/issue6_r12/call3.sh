# Issue 6 twelfth round, GPU call 3: which kernel at 1-12 tokens. Round 11's ncu showed the grouped kernels at 8
# tokens streaming at only 1.8-2.0 TB/s with 256 gate/up programs (8 row blocks x 32 column tiles of 64): narrower
# column tiles (32, 16) make 2-4x the programs. Against the gemv (prefetch 0 and 1), all on the k-chunked layout
# (chunk 256) that the model runs on a GPU; then the gemv GPU tests with the new default (prefetch 1 at one token).
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
C='[{"kernel": "gemv", "k_chunk": 256, "prefetch": 0}, {"kernel": "gemv", "k_chunk": 256, "prefetch": 1},
 {"kernel": "grouped", "k_chunk": 256, "block_n": 16}, {"kernel": "grouped", "k_chunk": 256, "block_n": 32},
 {"kernel": "grouped", "k_chunk": 256, "block_n": 64},
 {"kernel": "grouped", "k_chunk": 256, "block_n": 32, "block_n_down": 64},
 {"kernel": "grouped", "k_chunk": 256, "block_n": 16, "block_n_down": 32}]'
mkdir -p $OUT/moe
timeout 400 env PYTHONPATH=. OUT=$OUT/moe python3 benchmarks/kernels.py --only moe --moe-rows 1,2,4,6,8,12 \
  --no-baselines --moe-configs "$C" --budget 380 > $OUT/moe.log 2>&1
grep -E "copy|moe M=" $OUT/moe.log | cut -c1-200
timeout 120 env PYTHONPATH=. python3 -m pytest -q -m gpu tests/test_kernels_moe.py -k "gpu_kernel and gemv and not 600" \
  > $OUT/pytest.log 2>&1
tail -2 $OUT/pytest.log
