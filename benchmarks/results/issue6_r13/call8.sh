# Issue 6 thirteenth round, GPU call 8 (final code): the GPU end-to-end tests (the embedded model with the Pallas
# kernels gives the reference path's tokens; now 8 rounds per compiled call by default) and the demo command's
# generation on the GPU.
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
timeout 240 env PYTHONPATH=. python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kernels_e2e.py > $OUT/pytest.log 2>&1
tail -3 $OUT/pytest.log
timeout 120 env PYTHONPATH=. python3 -m ddtree_jax.cli.generate --mode=ddtree --budget=32 --max_new_tokens=64 \
  --prompt="def fibonacci(n):" > $OUT/demo.log 2>&1
tail -12 $OUT/demo.log
