# Issue 6 round 44, call 6 (timeout 200), for the last of the budget: the 1-token gemv with and without
# trigger_dependents (A/B/A after the dispatch's default, k-chunked 256; trigger_ab.sh), on whichever card starts.
nvidia-smi --query-gpu=name --format=csv | tee $OUT/gpu.txt
bash benchmarks/results/issue6_r44/trigger_ab.sh moe 155
