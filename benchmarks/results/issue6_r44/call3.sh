# Issue 6 round 44, call 3 (timeout 600): on an H200 the standing table (call1.sh; the H200 was last timed in round
# 19), on an H100 the trigger_dependents A/B (call2.sh).
if nvidia-smi --query-gpu=name --format=csv | grep -q H200; then bash benchmarks/results/issue6_r44/call1.sh
else bash benchmarks/results/issue6_r44/call2.sh; fi
