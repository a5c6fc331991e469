# Issue 6 sixth round, GPU call 2: queued timing (host dispatch overlapped), the new dispatch defaults
# (gemv pair splits at 2-8 tokens, MLA decode splits), GPU tests of the changed kernels.
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
timeout 110 python3 -m pytest -q -m gpu tests/test_kernels_moe.py tests/test_kernels_mla.py -k "gemv or mla" > $OUT/pytest.log 2>&1; tail -3 $OUT/pytest.log
mkdir -p $OUT/moe $OUT/mla $OUT/parts
OUT=$OUT/moe timeout 250 env PYTHONPATH=. python3 benchmarks/kernels.py --only moe --moe-rows 1,2,4,6,8,16,32,64,128,512,4096 --moe-kernels default,gemv,grouped --moe-max-configs 3 --no-baselines --budget 230 > $OUT/moe/moe.log 2>&1
tail -14 $OUT/moe/moe.log
OUT=$OUT/mla timeout 190 env PYTHONPATH=. python3 benchmarks/kernels.py --only mla --mla-no-sweep --budget 160 > $OUT/mla/mla.log 2>&1
tail -16 $OUT/mla/mla.log
