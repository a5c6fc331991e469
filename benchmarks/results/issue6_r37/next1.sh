# Issue 6, for the session after round 37: the GPU tests of round 37's defaults (not run yet: call 4's pytest hit its
# limit). Timeout 600; ask for nvidia-h200.
#  1. the marked MLA Triton tests (16-key blocks at 1K-2K, 32-row decode in one wave of 3 stages);
#  2. the one-launch gemv's GPU case at 2 tokens ([2-256-opts11], new), and the MoE dispatch's marked tests;
#  3. the end-to-end tests with the kernels (AR and DDTree verify) under round 37's dispatch;
#  4. the marked Mosaic MLA tests (one key pair a split is new at few keys).
mkdir -p $OUT; nvidia-smi --query-gpu=name --format=csv | tee $OUT/gpu.txt
timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kernels_mla.py \
  "tests/test_moe_gemv_pipelined.py::test_gpu_kernel[2-256-opts11]" > $OUT/t1.log 2>&1; echo "t1 rc $?"; tail -2 $OUT/t1.log
timeout 260 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kernels_e2e.py tests/test_kernels_moe.py \
  > $OUT/t2.log 2>&1; echo "t2 rc $?"; tail -2 $OUT/t2.log
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kernels_mla_mosaic.py > $OUT/t3.log 2>&1
echo "t3 rc $?"; tail -2 $OUT/t3.log
