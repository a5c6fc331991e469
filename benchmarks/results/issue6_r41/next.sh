# Issue 6, prepared in round 41 for the next GPU call: bash benchmarks/results/issue6_r41/next.sh (timeout 600).
# On an H100 (gpu.txt says which): call3.sh, which round 41 could not run (no GPU started after calls 1-2): the
# marked GPU tests of the new 1 x 8 x 8 x 12K case and the dispatch, and the dispatch against Mosaic at the shapes
# the 12K bound moved. On an H200: round 38's next_h200.sh, the standing table under the current dispatch (the
# H200 was last timed in round 19); call3.sh is then the call after it (both do not fit in one 600-s call).
mkdir -p $OUT; nvidia-smi --query-gpu=name --format=csv | tee $OUT/gpu.txt
if grep -q H200 $OUT/gpu.txt; then
  bash benchmarks/results/issue6_r38/next_h200.sh
else
  bash benchmarks/results/issue6_r41/call3.sh
fi
