# Issue 6 thirteenth round, GPU call 1: where the K2.6 slice's AR and small-tree forwards spend their time.
# Every kernel of a 1 dense + 1 MoE layer slice forward (plus the lm_head shard) timed alone by ncu (caches left
# warm: --cache-control none), next to the optimized HLO (fusion names = kernel names) and the same programs'
# blocking median outside ncu; then the 4-layer slice's AR / N=1 / N=8 rows for comparison with round 10.
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
export JAX_COMPILATION_CACHE_DIR=/tmp/jcc JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 \
  JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=0
S="4096,1;4096,9;32768,1"
# pass 1 (no ncu): compiles (autotuning outside ncu, cached for pass 2), HLO, blocking medians
timeout 150 env PYTHONPATH=. python3 benchmarks/ncu_programs.py drive --slice "$S" --slice_moe_layers 1 \
  --hlo_dir $OUT --time_reps 30 --programs $OUT/programs_pass1.json > $OUT/pass1.log 2>&1
grep -E "median|Error|error" $OUT/pass1.log | cut -c1-200
# pass 2: every kernel under ncu
timeout 200 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --page raw \
  --print-units base --log-file $OUT/ncu.csv env PYTHONPATH=. python3 benchmarks/ncu_programs.py drive \
  --slice "$S" --slice_moe_layers 1 --programs $OUT/programs.json > $OUT/pass2.log 2>&1
tail -3 $OUT/pass2.log
gzip -f $OUT/ncu.csv
python3 benchmarks/ncu_programs.py table $OUT/ncu.csv.gz --programs $OUT/programs.json | cut -c1-300
# the 4-layer slice, kernel path, AR and small trees at both contexts
timeout 150 env PYTHONPATH=. OUT=$OUT python3 benchmarks/k26_slice.py --impls pallas --budgets 1,8 \
  --budget_s 130 --reps 15 > $OUT/slice.log 2>&1
grep -E "pallas|ceilings" $OUT/slice.log | cut -c1-200
