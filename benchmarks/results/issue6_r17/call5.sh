# Issue 6, round 17 (session 22): call3.sh's 8-head decode check (the new default splits against the former
# ones, same run) on an H200 if one is lent, within the last ~200 s of the session's device time.
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
mla() {  # name shape configs
  mkdir -p $OUT/$1
  timeout 45 env PYTHONPATH=. OUT=$OUT/$1 python3 benchmarks/kernels.py --only mla --mla-shapes "$2" \
    --mla-configs "$3" --budget 30 > $OUT/$1.log 2>&1
  grep -E "copy|mla B=" $OUT/$1.log | cut -c1-900
}
mla mla8k "1,1,8,8192" '[{"num_splits": 32}]'
mla mla1k "1,1,8,1024" '[{"num_splits": 4}]'
# (It ran on the session's warm H100: an nvidia-h200 call takes a held H100.)
