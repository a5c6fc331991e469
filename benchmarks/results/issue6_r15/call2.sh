# Issue 6 fifteenth round, GPU call 2: the few-token INT4 MoE gemv with its pair loops unrolled (unroll_pairs: the
# expert ids as independent loads instead of one dependent load per loop trip; at one token the gate/up kernel
# visits all 8 pairs of the token, 7 of them remote), timed against the default at 1-6 tokens on the k-chunked
# layout; then ncu's sections (speed of light, memory, occupancy, scheduler, warp states, source counters) of the
# gemv kernels at one token and the grouped kernels at 8 tokens, on 8 local experts (so that ncu's save and
# restore of device memory around each replayed pass stays short; round 12 call 2 ran out of time on 48).
# Dry runs on the CPU: tests/test_kernels_moe.py -k unrolled; PYTHONPATH=. python3 benchmarks/kernels.py --smoke
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
C='[{"kernel": "default", "k_chunk": 256}, {"kernel": "gemv", "k_chunk": 256, "unroll_pairs": true},
 {"kernel": "default", "k_chunk": 256}]'
mkdir -p $OUT/moe
timeout 200 env PYTHONPATH=. OUT=$OUT/moe python3 benchmarks/kernels.py --only moe --moe-rows 1,2,4,6 \
  --no-baselines --moe-configs "$C" --budget 180 > $OUT/moe.log 2>&1
grep -E "copy|moe M=" $OUT/moe.log | cut -c1-300
timeout 250 env PYTHONPATH=. ncu --clock-control none -k "regex:moe_int4_" \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
  --section SchedulerStats --section WarpStateStats --section SourceCounters --page details \
  --log-file $OUT/ncu_sections.txt \
  python3 benchmarks/ncu_programs.py drive --moe 1,8 --moe_experts 8 --no_moe_stored --runs 1 \
  --gemv_kwargs '[{"unroll_pairs": true}]' --programs $OUT/ncu_programs.json > $OUT/ncu_drive.log 2>&1
tail -2 $OUT/ncu_drive.log; gzip -k $OUT/ncu_sections.txt; wc -l $OUT/ncu_sections.txt
grep -E "^  [a-z_]+|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Stall Long|Warp Cycles Per Issued" $OUT/ncu_sections.txt | head -80
