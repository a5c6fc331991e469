# Issue 6 round 44, call 4 (timeout 600), for a budget too small for call 3's H200 branch. On an H200: the MLA half
# of the standing table (round 42's call3.sh H200 branch, 170 s; the H200 was last timed in round 19), then the
# trigger_dependents A/B of the 1-token gemv and of 8-head decode at 8K and 1K. On an H100: call2.sh (the whole A/B).
# At most 8 files come back from $OUT: the kernels_table.md copies are removed (kernels.json has it all).
if nvidia-smi --query-gpu=name --format=csv | grep -q H200; then
  bash benchmarks/results/issue6_r42/call3.sh
  mkdir -p $OUT/moe $OUT/mla
  timeout 170 env PYTHONPATH=. OUT=$OUT/moe python3 benchmarks/kernels.py --only moe --no-baselines --device-span 12 \
    --moe-rows 1 --budget 155 --moe-configs '[{"kernel": "default", "k_chunk": 256},
    {"kernel": "gemv", "k_chunk": 256, "trigger_dependents": true}, {"kernel": "gemv", "k_chunk": 256}]' \
    > $OUT/moe.log 2>&1
  echo "moe rc $?"; grep -E "copy|  moe M=" $OUT/moe.log | cut -c1-400
  timeout 100 env PYTHONPATH=. OUT=$OUT/mla python3 benchmarks/kernels.py --only mla --mla-no-sweep --budget 90 \
    --device-span 12 --mla-shapes "1,1,8,8192;1,1,8,1024" \
    --mla-configs '[{"kernel": "pallas", "trigger_dependents": true}, {"kernel": "pallas"}]' > $OUT/mla.log 2>&1
  echo "mla rc $?"; grep -E "copy|mla B=" $OUT/mla.log | cut -c1-900
else
  bash benchmarks/results/issue6_r44/call2.sh
fi
rm -f $OUT/*/kernels_table.md
