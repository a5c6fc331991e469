# Issue 6, prepared in session 22 for the next session that gets an H200 (NOT RUN). Round 17 ran on an H100 only;
# this checks its one change on the H200 and re-times the decode grid there under the final dispatch:
# 1. the 8-head decode at 1K and 8K, the new default splits against the former ones (32 at 8K, 4 at 1K), same run;
# 2. the decode shapes, the dispatch only (the fraction table of RESULTS' seventeenth round, H200 column).
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
mla() {  # name shape configs
  mkdir -p $OUT/$1
  timeout 60 env PYTHONPATH=. OUT=$OUT/$1 python3 benchmarks/kernels.py --only mla --mla-shapes "$2" \
    --mla-configs "$3" --budget 45 > $OUT/$1.log 2>&1
  grep -E "copy|mla B=" $OUT/$1.log | cut -c1-900
}
mla mla8k "1,1,8,8192" '[{"num_splits": 32}]'
mla mla1k "1,1,8,1024" '[{"num_splits": 4}]'
mkdir -p $OUT/grid
timeout 270 env PYTHONPATH=. OUT=$OUT/grid python3 benchmarks/kernels.py --only mla --mla-no-sweep --budget 230 \
  --mla-shapes "1,1,8,8192;1,1,64,8192;1,1,8,1024;1,1,64,1024;1,1,8,32768;1,1,64,32768;8,1,8,32768;1,1,8,131072;1,1,64,131072" \
  > $OUT/grid/mla.log 2>&1
grep -E "copy|mla B=|skipped" $OUT/grid/mla.log | cut -c1-400
