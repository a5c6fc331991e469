# Session 15, GPU call 9 on nvidia-h200-x2: benchmarks/multi_gpu.py part 1, DDTree only (the embedded model's
# DDTree tokens on 1x2 and 2x1 meshes of two real H200s against one device, fp32), which round 10's x2 call could
# not finish in its remaining budget. Now with 8 rounds per compiled call (the engine's default).
set -x
nvidia-smi --query-gpu=name,memory.total --format=csv > $OUT/gpu.txt
timeout 290 env PYTHONPATH=. python3 benchmarks/multi_gpu.py --parts 1 --part1_modes ddtree \
  --out $OUT/multi_gpu.json > $OUT/multi_gpu.log 2>&1
echo rc=$?
grep -v "^I1204\|^W1204" $OUT/multi_gpu.log | tail -12
