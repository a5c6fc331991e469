# Issue 6 ninth round, GPU call 5 (session 11): where the ~20 us fixed cost of a short MLA decode goes.
# Dry run on the CPU: PYTHONPATH=. python3 benchmarks/mla_decode_parts.py --smoke
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
timeout 300 env PYTHONPATH=. python3 benchmarks/mla_decode_parts.py \
  --shapes "1,1,64,1024;1,1,64,8192;1,1,64,32768;1,1,64,131072;1,1,8,8192;1,1,8,32768" > $OUT/parts.log 2>&1
tail -9 $OUT/parts.log
