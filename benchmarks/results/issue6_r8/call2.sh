# Issue 6 eighth round, GPU call 2: the default build's PTX / SASS / ptxas report (bf16 partials; the small dump
# files only), the K2.6 one-GPU slice with the Mosaic MLA kernel dispatched (for the cost model), then the
# dispatch on the compute-bound MLA shapes not timed in call 1 (1 x 257 x 64 x 128K for the first time).
set -x
mkdir -p $OUT/mla /tmp/d
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
MOSAIC_GPU_DUMP_SASS=1 MOSAIC_GPU_DUMP_PTX=1 MOSAIC_GPU_DUMP_PTXAS=1 MOSAIC_GPU_DUMP_TO=/tmp/d \
  timeout 100 env PYTHONPATH=. python3 benchmarks/results/issue6_r8/dump_kernel.py --partial_dtype bfloat16 \
  > /tmp/d/run.log 2>&1
ls -la /tmp/d
rm -f /tmp/d/*mlir-passes*
tar czf $OUT/dump.tgz -C /tmp d
ls -la $OUT
timeout 175 env PYTHONPATH=. python3 benchmarks/k26_slice.py --budget_s 150 --reps 12 > $OUT/k26_slice.log 2>&1
tail -5 $OUT/k26_slice.log
OUT=$OUT/mla timeout 280 env PYTHONPATH=. python3 benchmarks/kernels.py --only mla --mla-no-sweep \
  --mla-shapes "1,257,64,131072;1,64,8,32768;1,64,64,131072;1,257,64,32768;1,16,64,1024" \
  --budget 250 > $OUT/mla/mla.log 2>&1
grep -E "^\[|^\|" $OUT/mla/mla.log | tail -30
