# Issue 6 twelfth round, GPU call 1: the few-token INT4 MoE gemv with its K loop loading one step ahead
# (pallas_gemv._tile_gemv prefetch 1: words and scales; 2: activations too) and, at one token, without the XLA iota
# of the visiting order. GPU tests of the gemv variants against the fp32 reference at K2.6 shapes, then the
# variants timed on the k-chunked layout the model runs (chunk 256) at 1-8 tokens.
# Dry runs on the CPU: tests/test_kernels_moe.py -k gemv; PYTHONPATH=. python3 benchmarks/kernels.py --smoke
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
timeout 200 env PYTHONPATH=. python3 -m pytest -q -m gpu tests/test_kernels_moe.py -k "gpu_kernel and gemv" \
  > $OUT/pytest.log 2>&1
tail -3 $OUT/pytest.log
C='[{"kernel": "gemv", "k_chunk": 256}, {"kernel": "gemv", "k_chunk": 256, "prefetch": 1},
 {"kernel": "gemv", "k_chunk": 256, "prefetch": 2}, {"kernel": "gemv", "k_chunk": 256, "prefetch": 1, "block_n_down": 16},
 {"kernel": "gemv", "k_chunk": 256, "prefetch": 1, "block_n": 8}]'
mkdir -p $OUT/moe
timeout 330 env PYTHONPATH=. OUT=$OUT/moe python3 benchmarks/kernels.py --only moe --moe-rows 1,2,4,8 \
  --no-baselines --moe-configs "$C" --budget 300 > $OUT/moe.log 2>&1
grep -E "copy|moe M=|cfg|ms" $OUT/moe.log | cut -c1-300 | tail -40
