# Issue 6 eighth round, GPU call 4: the kernel with the opaque zero (mosaic_gpu._opaque_zero: the wgmma smem
# descriptors are no longer hoisted out of the key loop and spilled). ptxas report + PTX, GPU tests, then the
# dispatch on the compute-bound shapes (compare with calls 1-2: same code but for the zero).
set -x
mkdir -p $OUT/mla /tmp/d
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
MOSAIC_GPU_DUMP_PTX=1 MOSAIC_GPU_DUMP_PTXAS=1 MOSAIC_GPU_DUMP_TO=/tmp/d \
  timeout 70 env PYTHONPATH=. python3 benchmarks/results/issue6_r8/dump_kernel.py > /tmp/d/run.log 2>&1
tail -1 /tmp/d/run.log
cat /tmp/d/*.ptxas
rm -f /tmp/d/*mlir-passes* /tmp/d/*layout_inference* /tmp/d/*constraint*
tar czf $OUT/dump.tgz -C /tmp d
timeout 100 env PYTHONPATH=. python3 -m pytest -q -rA -m gpu tests/test_kernels_mla_mosaic.py -k "matches_reference" > $OUT/pytest.log 2>&1
tail -9 $OUT/pytest.log
OUT=$OUT/mla timeout 150 env PYTHONPATH=. python3 benchmarks/kernels.py --only mla --mla-no-sweep \
  --mla-shapes "1,257,8,32768;8,16,64,4096;1,64,8,32768;1,257,64,32768" --budget 115 > $OUT/mla/mla.log 2>&1
grep -E "^\[|^\|" $OUT/mla/mla.log | tail -12
