# Issue 6 round 44, call 2 (timeout 600; H100 or H200, gpu.txt says which). trigger_dependents: the kernel before
# another issues griddepcontrol.launch_dependents first (custom_calls/dependent_launch.py), so that the next kernel's
# programs are placed while it runs (XLA never issues it in a Pallas kernel). 1. The marked GPU tests that it gives
# the same bits (tests/test_dependent_launch.py). 2. Busy time of the 1-token gemv (two launches; k-chunked 256)
# with and without it, after the dispatch. 3. 8-head decode at 8K, 1K, 32K (Triton attention kernel, then the split
# combine) with and without it. 4. 64-head decode at 16K (Mosaic kernel, then the combine) with and without it.
# At most 8 files come back from $OUT: the kernels_table.md copies are removed (kernels.json has it all).
# The plain configs come after the triggered ones, next to the dispatch's default first: an A/B/A in each process.
mkdir -p $OUT/moe $OUT/mla $OUT/mosaic; nvidia-smi --query-gpu=name --format=csv | tee $OUT/gpu.txt
timeout 130 python3 -m pytest -q -p no:cacheprovider -rs tests/test_dependent_launch.py > $OUT/tests.log 2>&1
echo "tests rc $?"; tail -4 $OUT/tests.log
timeout 170 env PYTHONPATH=. OUT=$OUT/moe python3 benchmarks/kernels.py --only moe --no-baselines --device-span 12 \
  --moe-rows 1 --budget 155 --moe-configs '[{"kernel": "default", "k_chunk": 256},
  {"kernel": "gemv", "k_chunk": 256, "trigger_dependents": true}, {"kernel": "gemv", "k_chunk": 256}]' \
  > $OUT/moe.log 2>&1
echo "moe rc $?"; grep -E "copy|  moe M=" $OUT/moe.log | cut -c1-400
timeout 150 env PYTHONPATH=. OUT=$OUT/mla python3 benchmarks/kernels.py --only mla --mla-no-sweep --budget 140 \
  --device-span 12 --mla-shapes "1,1,8,8192;1,1,8,1024;1,1,8,32768" \
  --mla-configs '[{"kernel": "pallas", "trigger_dependents": true}, {"kernel": "pallas"}]' > $OUT/mla.log 2>&1
echo "mla rc $?"; grep -E "copy|mla B=" $OUT/mla.log | cut -c1-900
timeout 90 env PYTHONPATH=. OUT=$OUT/mosaic python3 benchmarks/kernels.py --only mla --mla-no-sweep --budget 80 \
  --device-span 12 --mla-shapes "1,1,64,16384" \
  --mla-configs '[{"kernel": "mosaic", "trigger_dependents": true}, {"kernel": "mosaic"}]' > $OUT/mosaic.log 2>&1
echo "mosaic rc $?"; grep -E "copy|mla B=" $OUT/mosaic.log | cut -c1-900
rm -f $OUT/*/kernels_table.md
