# Issue 6, round 23, prepared for the next session (not run): where the one-token gemv's time goes, per SASS line.
# Round 23 ruled out the K loop's load latency and instruction issue as the limit (benchmarks/RESULTS.md). This takes
# ncu's full set and the per-instruction stall samples of the dispatch's two one-token kernels (gate/up, down;
# k-chunked, 8 local experts). -c 2 profiles only the first two matching launches (the compile run's), so ncu's
# replays stay short (call 3 of round 23 ran out at 230 s profiling every launch).
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
timeout 200 env PYTHONPATH=. ncu --clock-control none -k "regex:moe_int4_" -c 2 --set full -o $OUT/gemv1 \
  python3 benchmarks/ncu_programs.py drive --moe 1 --moe_experts 8 --no_moe_stored --runs 1 \
  --programs $OUT/ncu_programs.json > $OUT/ncu_drive.log 2>&1
tail -3 $OUT/ncu_drive.log
ncu -i $OUT/gemv1.ncu-rep --page details > $OUT/details.txt 2>&1
ncu -i $OUT/gemv1.ncu-rep --page source --print-source sass --csv > $OUT/source_sass.csv 2>&1
gzip -k $OUT/source_sass.csv; wc -l $OUT/details.txt $OUT/source_sass.csv
grep -E "^  [a-z_]+|Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|Issue Slots Busy|No Eligible|L2 Hit|L1/TEX Hit|Stall" $OUT/details.txt | head -60
