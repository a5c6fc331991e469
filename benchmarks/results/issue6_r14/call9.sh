# Issue 6 fourteenth round, GPU call 9 (final code): the drafter's top-K through ddtree_jax/topk.py (two stages of
# chunks of 512 for K <= 64 and <= 64 rows, from call 8). The GPU end-to-end tests (the embedded model with the
# kernels against the reference path's tokens, AR and DDTree N=32) and the demo command (call 5: 1011 tokens/s).
set -x
timeout 150 env PYTHONPATH=. python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kernels_e2e.py > $OUT/pytest.log 2>&1
tail -2 $OUT/pytest.log
timeout 60 env PYTHONPATH=. python3 -m ddtree_jax.cli.generate --mode=ddtree --budget=32 --max_new_tokens=64 \
  --prompt="def fibonacci(n):" > $OUT/demo.log 2>&1
tail -1 $OUT/demo.log
