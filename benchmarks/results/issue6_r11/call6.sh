# Issue 6 eleventh round, GPU call 6: the final split combine (call 5's rewrite, a traced-zero start for its
# log-sum-exp load) through both MLA kernels on the GPU: the Triton kernel's GPU test (8-head decode with splits, a
# tree, 64 heads), the Mosaic kernel against the reference and through the dispatch, and the combine alone.
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
timeout 190 env PYTHONPATH=. python3 -m pytest -q -m gpu tests/test_kernels_mla.py tests/test_mla_split_combine.py \
  tests/test_kernels_mla_mosaic.py -k "gpu_kernel or gpu_matches or dispatch" > $OUT/pytest.log 2>&1
tail -2 $OUT/pytest.log
