# Issue 6, round 29 (session 34), call 2: the grouped kernels' two parts in one launch
# (custom_calls/moe_int4/pallas_triton_pipelined.py, new) on a GPU for the first time: its marked tests at the K2.6
# shard's shapes, then timed against the dispatch (the grouped kernels' two launches at 10-32 tokens, the one-launch
# gemv at 8) on k-chunked 256 experts. kernels.py times the dispatch on the stored layout first.
mkdir -p $OUT/t; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
timeout 150 env PYTHONPATH=. python3 -m pytest -q -rA -m gpu tests/test_moe_grouped_one_launch.py --durations=0 \
  > $OUT/pytest.log 2>&1
echo "pytest rc $?"; tail -8 $OUT/pytest.log | cut -c1-300
C='[{"kernel": "default", "k_chunk": 256}, {"kernel": "grouped_one_launch", "k_chunk": 256}]'
timeout 380 env PYTHONPATH=. OUT=$OUT/t python3 benchmarks/kernels.py --only moe --moe-rows 10,12,16,32,8 \
  --no-baselines --moe-configs "$C" --budget 360 > $OUT/t.log 2>&1
echo "kernels rc $?"; grep -E "copy|  moe M=" $OUT/t.log | cut -c1-220
