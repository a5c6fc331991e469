# Issue 6 eighth round, GPU call 3: the default build's PTX / SASS / ptxas report (bf16 partials; call 2's dump
# failed on a stale script argument), the GPU tests of the final kernel, then 64-head decode on the Mosaic
# kernel with bf16 partials next to the dispatch (Triton), to settle the decode rule.
set -x
mkdir -p $OUT/mla /tmp/d
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
MOSAIC_GPU_DUMP_SASS=1 MOSAIC_GPU_DUMP_PTX=1 MOSAIC_GPU_DUMP_PTXAS=1 MOSAIC_GPU_DUMP_TO=/tmp/d \
  timeout 90 env PYTHONPATH=. python3 benchmarks/results/issue6_r8/dump_kernel.py > /tmp/d/run.log 2>&1
tail -2 /tmp/d/run.log
rm -f /tmp/d/*mlir-passes*
ls -la /tmp/d
tar czf $OUT/dump.tgz -C /tmp d
timeout 170 env PYTHONPATH=. python3 -m pytest -q -rA -m gpu tests/test_kernels_mla_mosaic.py > $OUT/pytest.log 2>&1
tail -12 $OUT/pytest.log
OUT=$OUT/mla timeout 170 env PYTHONPATH=. python3 benchmarks/kernels.py --only mla --mla-shapes "1,1,64,32768;1,1,64,131072" \
  --mla-configs '[{"kernel": "mosaic"}]' --budget 150 > $OUT/mla/mla.log 2>&1
grep -E "^\[|^\|" $OUT/mla/mla.log | tail -8
