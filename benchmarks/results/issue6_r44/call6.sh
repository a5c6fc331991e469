# Issue 6 round 44, call 6 (timeout 200), for the last of the budget: the 1-token gemv with and without
# trigger_dependents (A/B/A after the dispatch's default, k-chunked 256), on whichever card starts.
mkdir -p $OUT/moe; nvidia-smi --query-gpu=name --format=csv | tee $OUT/gpu.txt
timeout 170 env PYTHONPATH=. OUT=$OUT/moe python3 benchmarks/kernels.py --only moe --no-baselines --device-span 12 \
  --moe-rows 1 --budget 155 --moe-configs '[{"kernel": "default", "k_chunk": 256},
  {"kernel": "gemv", "k_chunk": 256, "trigger_dependents": true}, {"kernel": "gemv", "k_chunk": 256}]' \
  > $OUT/moe.log 2>&1
echo "moe rc $?"; grep -E "copy|  moe M=" $OUT/moe.log | cut -c1-400
