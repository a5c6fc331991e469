# Issue 6 eighth round, GPU call 1: where the Mosaic MLA kernel spills (SASS / PTX dumps of the "base" and
# "early" schedules; the dumps came back too large, 366 MB of MLIR pass logs), the GPU tests of every schedule x per-split dtype, then the schedules and bf16 partials
# timed on the compute-bound shapes next to the dispatched default (base, f32 partials).
set -x
mkdir -p $OUT/mla
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
for sched in base early; do
  mkdir -p /tmp/dump_$sched
  MOSAIC_GPU_DUMP_SASS=1 MOSAIC_GPU_DUMP_PTX=1 MOSAIC_GPU_DUMP_PTXAS=1 MOSAIC_GPU_DUMP_TO=/tmp/dump_$sched \
    timeout 100 env PYTHONPATH=. python3 benchmarks/results/issue6_r8/dump_kernel.py --schedule $sched \
    > /tmp/dump_$sched/run.log 2>&1
  tail -2 /tmp/dump_$sched/run.log; ls -la /tmp/dump_$sched | head
done
tar czf $OUT/dumps.tgz -C /tmp dump_base dump_early
MOSAIC_GPU_DUMP_PTXAS=1 timeout 170 env PYTHONPATH=. python3 -m pytest -q -s -rA -m gpu tests/test_kernels_mla_mosaic.py > $OUT/pytest.log 2>&1
grep -E "spill|Used|passed|failed|Error" $OUT/pytest.log | sort | uniq -c | head -30
OUT=$OUT/mla MOSAIC_GPU_DUMP_PTXAS=1 timeout 300 env PYTHONPATH=. python3 benchmarks/kernels.py --only mla \
  --mla-shapes "1,257,8,32768;8,16,64,4096;1,64,8,32768;1,257,64,32768;1,64,64,131072" \
  --mla-configs '[{"kernel": "mosaic", "partial_dtype": "bfloat16"}, {"kernel": "mosaic", "schedule": "pieces", "partial_dtype": "bfloat16"}, {"kernel": "mosaic", "schedule": "early", "partial_dtype": "bfloat16"}]' \
  --budget 270 > $OUT/mla/mla.log 2>&1
grep -E "^\[|^\|" $OUT/mla/mla.log | tail -30
