# Issue 6 round 43, call 1 (timeout 600). On an H200 (gpu.txt says which): round 38's next_h200.sh, the standing
# table under the current dispatch (the H200 was last timed in round 19). On an H100: round 42's call3.sh, the
# one-token 64-head repeat at 10K-12K and 2 tokens x 32 heads at 12K, each against Mosaic in the same process.
nvidia-smi --query-gpu=name --format=csv > /tmp/gpu.txt
if grep -q H200 /tmp/gpu.txt; then
  bash benchmarks/results/issue6_r38/next_h200.sh
else
  bash benchmarks/results/issue6_r42/call3.sh
fi
