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
# Where the few-token gemv's time goes (call 1: prefetch 1 helps at one token only): ncu's speed-of-light, memory,
# occupancy, scheduler and warp-state sections of its two kernels at 1 and 8 tokens, prefetch 0 and 1.
timeout 200 env PYTHONPATH=. ncu --clock-control none -k "regex:moe_int4_.*gemv" \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
  --section SchedulerStats --section WarpStateStats --page details --log-file $OUT/ncu_gemv.txt \
  python3 benchmarks/ncu_programs.py drive --moe 1,8 --gemv_kwargs '[{"prefetch": 0}, {"prefetch": 1}]' \
  --programs $OUT/ncu_gemv_programs.json > $OUT/ncu_gemv_drive.log 2>&1
tail -2 $OUT/ncu_gemv_drive.log; gzip -k $OUT/ncu_gemv.txt; wc -l $OUT/ncu_gemv.txt
