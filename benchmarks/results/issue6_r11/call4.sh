# Issue 6 eleventh round, GPU call 4: the GPU tests that run the MLA kernels through the new split combine and the
# one-reduction mask words (Triton and Mosaic kernels, and the embedded model end to end against the reference).
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
timeout 420 env PYTHONPATH=. python3 -m pytest -q -m gpu tests/test_kernels_mla.py tests/test_kernels_mla_mosaic.py \
  tests/test_kernels_e2e.py tests/test_mla_split_combine.py > $OUT/pytest.log 2>&1
tail -5 $OUT/pytest.log
