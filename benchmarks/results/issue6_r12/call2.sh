# Issue 6 twelfth round, GPU call 2: the split combine with every split in one step (no loop: round 11's SASS
# reading) against its default blocks and XLA, in the short decodes; the end-to-end GPU test of the embedded
# model on the final combine (not re-run after round 11's rewrite).
# Dry run on the CPU: PYTHONPATH=. python3 benchmarks/mla_decode_parts.py --smoke
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
timeout 250 env PYTHONPATH=. python3 benchmarks/mla_decode_parts.py --out $OUT/mla_decode_parts.json \
  --shapes "1,1,64,8192;1,1,64,32768;1,1,8,32768" \
  --combine_blocks "1,32,128,4;2,32,64,4;1,64,64,4;1,16,256,4" > $OUT/parts.log 2>&1
grep "mla B=" $OUT/parts.log
timeout 250 env PYTHONPATH=. python3 -m pytest -q -m gpu tests/test_kernels_e2e.py > $OUT/pytest_e2e.log 2>&1
tail -3 $OUT/pytest_e2e.log
