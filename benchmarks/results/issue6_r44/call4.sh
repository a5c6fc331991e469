# Issue 6 round 44, call 4 (timeout 600), for a budget too small for call 3's H200 branch. On an H200: the MLA half
# of the standing table (round 42's call3.sh H200 branch, 170 s; the H200 was last timed in round 19), then the
# trigger_dependents A/B of the 1-token gemv and of 8-head decode at 8K and 1K. On an H100: call2.sh (the whole A/B).
if nvidia-smi --query-gpu=name --format=csv | grep -q H200; then
  bash benchmarks/results/issue6_r42/call3.sh
  rm -f $OUT/t/kernels_table.md               # at most 8 files come back
  bash benchmarks/results/issue6_r44/trigger_ab.sh moe 155
  bash benchmarks/results/issue6_r44/trigger_ab.sh mla "1,1,8,8192;1,1,8,1024" 90
else
  bash benchmarks/results/issue6_r44/call2.sh
fi
