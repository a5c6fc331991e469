# Issue 6 eleventh round, GPU call 2: block sizes of the one-launch split combine (call 1: its default, 8 rows x 16
# columns a program, reads 32-byte row pieces and ran at ~0.8 TB/s: slower alone than XLA's five kernels).
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
timeout 420 env PYTHONPATH=. python3 benchmarks/mla_decode_parts.py --out $OUT/mla_decode_parts.json \
  --shapes "1,1,64,8192;1,1,64,32768;1,1,64,131072;1,1,8,32768" \
  --combine_blocks "1,64,32,4;1,64,16,2;2,64,16,4;4,64,16,4;1,128,16,4;1,32,32,4;2,32,32,4;1,64,64,8" \
  > $OUT/parts.log 2>&1
grep "mla B=" $OUT/parts.log
