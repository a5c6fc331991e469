# Issue 6 twelfth round, GPU call 4: the grouped kernels' routing in one launch (route_kernel.py, up to 128 pairs)
# against XLA's route (about ten small kernels), at 6-32 tokens on the k-chunked layout (chunk 256); with call 3's
# best small-token tiles (block_n 32, block_n_down 64) too. GPU tests of the route kernel and the grouped kernels,
# then the embedded model end to end (its verify steps run the grouped kernels through the route kernel).
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
timeout 150 env PYTHONPATH=. python3 -m pytest -q -m gpu tests/test_moe_route_kernel.py tests/test_kernels_moe.py \
  -k "route or (gpu_kernel and grouped and not 600)" > $OUT/pytest.log 2>&1
tail -2 $OUT/pytest.log
C='[{"kernel": "grouped", "k_chunk": 256}, {"kernel": "grouped", "k_chunk": 256, "route_in_kernel": false},
 {"kernel": "grouped", "k_chunk": 256, "block_n": 32, "block_n_down": 64},
 {"kernel": "gemv", "k_chunk": 256}]'
mkdir -p $OUT/moe
timeout 260 env PYTHONPATH=. OUT=$OUT/moe python3 benchmarks/kernels.py --only moe --moe-rows 6,8,12,16,32 \
  --no-baselines --moe-configs "$C" --budget 240 > $OUT/moe.log 2>&1
grep -E "copy|moe M=" $OUT/moe.log | cut -c1-200
timeout 150 env PYTHONPATH=. python3 -m pytest -q -m gpu tests/test_kernels_e2e.py > $OUT/pytest_e2e.log 2>&1
tail -2 $OUT/pytest_e2e.log
