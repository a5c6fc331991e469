# Issue 6, round 27: prepared for the next session, NOT RUN. The new dispatch (one launch at 4-8 tokens) on the issue's
# machine, asked for as kind nvidia-h200 (an H100 may come: say which card gave each number). On k-chunked 256 experts:
# the dispatch, the two launches it replaced at 4-6 tokens (gemv) and the grouped kernels it replaced at 8, at 2-8
# tokens; kernels.py also puts the stored-layout dispatch first. Twice, one process each. ~45 s of compile per
# one-launch config: about 8 minutes in all.
mkdir -p $OUT; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
C='[{"kernel": "default", "k_chunk": 256}, {"kernel": "gemv", "k_chunk": 256}, {"kernel": "grouped", "k_chunk": 256}]'
for r in 1 2; do
  mkdir -p $OUT/r$r
  timeout 270 env PYTHONPATH=. OUT=$OUT/r$r python3 benchmarks/kernels.py --only moe --moe-rows 4,6,8,2 --no-baselines \
    --moe-configs "$C" --budget 250 > $OUT/r$r.log 2>&1
  grep -E "copy|  moe M=" $OUT/r$r.log | cut -c1-200
done
