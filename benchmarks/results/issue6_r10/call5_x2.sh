# Session 12, GPU call 5 on nvidia-h200-x2 (the first multi-GPU machine lent): benchmarks/multi_gpu.py part 1 only
# (the embedded model's tokens on 1x2 and 2x1 meshes against one device, fp32, AR and DDTree N=16). On a GPU the
# engine now re-lays the INT4 experts k-chunked, so this also runs the k-chunked experts split over 2 GPUs.
set -x
nvidia-smi --query-gpu=name,memory.total --format=csv > $OUT/gpu.txt
timeout 150 env PYTHONPATH=. python3 benchmarks/multi_gpu.py --parts 1 --part1_modes ar,ddtree \
  --out $OUT/multi_gpu.json > $OUT/multi_gpu.log 2>&1
tail -8 $OUT/multi_gpu.log
