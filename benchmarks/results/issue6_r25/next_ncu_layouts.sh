# Issue 6, round 25, prepared for the next session (not run): does the gemv lose 5-10% on k-chunked experts (2-8
# tokens) to memory locality? Round 25's SASS shows the same loops on both layouts; a gate/up program's bytes are
# one 14 KB block on the stored layout and 28 pieces of 512 B, 256 KB apart, on the k-chunked one. This records
# ncu's memory sections (DRAM throughput, L2 hit rates and sectors per request, the memory tables) for the
# dispatch's 2-token gemv kernels on both layouts (8 local experts, as round 23's call 4). -c 8: the first eight
# gemv launches, which cover both programs' gate/up and down kernels at --runs 1.
mkdir -p $OUT; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
timeout 300 env PYTHONPATH=. ncu --clock-control none -k "regex:moe_int4_.*gemv" -c 8 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
  --section LaunchStats --section Occupancy -o $OUT/layouts \
  python3 benchmarks/ncu_programs.py drive --moe 2 --moe_experts 8 --runs 1 \
  --programs $OUT/ncu_programs.json > $OUT/ncu_drive.log 2>&1
tail -3 $OUT/ncu_drive.log
ncu -i $OUT/layouts.ncu-rep --page details > $OUT/details.txt 2>&1
grep -E "^  [a-z_]+|Duration|DRAM Throughput|Memory Throughput|L2 Hit|L1/TEX Hit|Sectors/Req|Mem Busy|Max Bandwidth" \
  $OUT/details.txt | head -80
