# Issue 6 round 44, call 2 (timeout 600; H100 or H200, gpu.txt says which). trigger_dependents: the kernel before
# another issues griddepcontrol.launch_dependents first (custom_calls/dependent_launch.py), so that the next kernel's
# programs are placed while it runs (XLA never issues it in a Pallas kernel). 1. The marked GPU tests that it gives
# the same bits (tests/test_dependent_launch.py). 2. Busy time of the 1-token gemv (two launches; k-chunked 256)
# with and without it, after the dispatch. 3. 8-head decode at 8K, 1K, 32K (Triton attention kernel, then the split
# combine) with and without it. 4. 64-head decode at 16K (Mosaic kernel, then the combine) with and without it.
# Each part is an A/B/A in one process (trigger_ab.sh).
nvidia-smi --query-gpu=name --format=csv | tee $OUT/gpu.txt
timeout 130 python3 -m pytest -q -p no:cacheprovider -rs tests/test_dependent_launch.py > $OUT/tests.log 2>&1
echo "tests rc $?"; tail -4 $OUT/tests.log
bash benchmarks/results/issue6_r44/trigger_ab.sh moe 155
bash benchmarks/results/issue6_r44/trigger_ab.sh mla "1,1,8,8192;1,1,8,1024;1,1,8,32768" 140
bash benchmarks/results/issue6_r44/trigger_ab.sh mosaic "1,1,64,16384" 80
