# Issue 6 seventh round, GPU call 1: first compile/run of the experimental Mosaic GPU MLA kernel (ptxas report
# for spills), its timing on the compute-bound shapes next to the Triton default, and the end-to-end kernel test
# with the round-6 dispatch defaults.
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
MOSAIC_GPU_DUMP_PTXAS=1 timeout 170 env PYTHONPATH=. python3 -m pytest -q -s -rA --tb=long -m gpu tests/test_kernels_mla_mosaic.py > $OUT/mosaic_pytest.log 2>&1
grep -i -E "spill|registers|passed|failed|error" $OUT/mosaic_pytest.log | head -30
mkdir -p $OUT/mla
OUT=$OUT/mla timeout 200 env PYTHONPATH=. python3 benchmarks/kernels.py --only mla --mla-mosaic --mla-shapes "1,257,8,32768;1,257,64,32768;1,64,8,32768;8,16,64,4096;1,1,64,131072;1,64,64,131072" --budget 170 > $OUT/mla/mla.log 2>&1
tail -20 $OUT/mla/mla.log
timeout 150 env PYTHONPATH=. python3 -m pytest -q -rA -m gpu tests/test_kernels_e2e.py > $OUT/e2e_pytest.log 2>&1
tail -5 $OUT/e2e_pytest.log
