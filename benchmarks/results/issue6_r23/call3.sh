# Run on commit 724736a (f16_dots was removed after this call, benchmarks/RESULTS.md round 23).
# Issue 6, round 23 (session 28), call 3: why the half2 word dots (call 2: 161 instructions a K-loop trip against
# 260) are not faster at one token: ncu's sections of the one-token gemv kernels, the default against f16_dots, on 8
# local experts (ncu's save and restore around each replayed pass stays short), k-chunked layout.
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
timeout 230 env PYTHONPATH=. ncu --clock-control none -k "regex:moe_int4_" \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
  --section SchedulerStats --section WarpStateStats --page details --log-file $OUT/ncu_sections.txt \
  python3 benchmarks/ncu_programs.py drive --moe 1 --moe_experts 8 --no_moe_stored --runs 1 \
  --gemv_kwargs '[{"f16_dots": true}]' --programs $OUT/ncu_programs.json > $OUT/ncu_drive.log 2>&1
tail -2 $OUT/ncu_drive.log; gzip -k $OUT/ncu_sections.txt
grep -E "^  [a-z_]+|Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Stall|Warp Cycles Per Issued|Issue Slots Busy|Eligible Warps|No Eligible" $OUT/ncu_sections.txt | head -90
