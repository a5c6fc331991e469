# Issue 6 fifteenth round, GPU call 5 (final code): the gemv's new defaults at 1-6 tokens (4 warps, pairs unrolled;
# calls 3-4) on the GPU: its GPU tests against the fp32 reference (K2.6 shard, 1 token: the gemv as stored and
# k-chunked) and the embedded model end to end; then the dispatch timed at 1-8 tokens on the k-chunked layout.
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
timeout 150 env PYTHONPATH=. python3 -m pytest -q -m gpu tests/test_kernels_moe.py -k "gpu_kernel and gemv and not 600" \
  > $OUT/pytest_moe.log 2>&1
tail -2 $OUT/pytest_moe.log
timeout 150 env PYTHONPATH=. python3 -m pytest -q -m gpu tests/test_kernels_e2e.py > $OUT/pytest_e2e.log 2>&1
tail -2 $OUT/pytest_e2e.log
C='[{"kernel": "default", "k_chunk": 256}]'
mkdir -p $OUT/moe
timeout 200 env PYTHONPATH=. OUT=$OUT/moe python3 benchmarks/kernels.py --only moe --moe-rows 1,2,4,6,8 \
  --no-baselines --moe-configs "$C" --budget 190 > $OUT/moe.log 2>&1
grep -E "copy|moe M=" $OUT/moe.log | cut -c1-400
