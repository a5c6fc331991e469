# Issue 6 round 44, call 2 (timeout 600; H100 or H200, gpu.txt says which). trigger_dependents: the kernel before
# another issues griddepcontrol.launch_dependents first (custom_calls/dependent_launch.py), so that the next kernel's
# programs are placed while it runs (XLA never issues it in a Pallas kernel). 1. The marked GPU tests that it gives
# the same bits (tests/test_dependent_launch.py). 2. Busy time of the 1-2 token gemv (two launches; k-chunked 256)
# with and without it, next to the dispatch (one launch from 2 tokens). 3. 8-head decode at 1K, 8K, 32K (attention
# kernel then split combine) with and without it. Plain configs come last, after the triggered ones, as an A/B/A.
mkdir -p $OUT/moe $OUT/mla; nvidia-smi --query-gpu=name --format=csv | tee $OUT/gpu.txt
timeout 150 python3 -m pytest -q -p no:cacheprovider -rs tests/test_dependent_launch.py > $OUT/tests.log 2>&1
echo "tests rc $?"; tail -4 $OUT/tests.log
timeout 230 env PYTHONPATH=. OUT=$OUT/moe python3 benchmarks/kernels.py --only moe --no-baselines --device-span 12 \
  --moe-rows 1,2 --budget 215 --moe-configs '[{"kernel": "default", "k_chunk": 256},
  {"kernel": "gemv", "k_chunk": 256, "trigger_dependents": true}, {"kernel": "gemv", "k_chunk": 256}]' \
  > $OUT/moe.log 2>&1
echo "moe rc $?"; grep -E "copy|  moe M=" $OUT/moe.log | cut -c1-400
timeout 190 env PYTHONPATH=. OUT=$OUT/mla python3 benchmarks/kernels.py --only mla --mla-no-sweep --budget 175 \
  --device-span 12 --mla-shapes "1,1,8,8192;1,1,8,32768;1,1,8,1024" \
  --mla-configs '[{"kernel": "pallas", "trigger_dependents": true}, {"kernel": "pallas"}]' > $OUT/mla.log 2>&1
echo "mla rc $?"; grep -E "copy|mla B=" $OUT/mla.log | cut -c1-900
