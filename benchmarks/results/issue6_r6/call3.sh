# Issue 6 sixth round, GPU call 3 (the last ~7 device minutes): a second sample of the dispatched MoE defaults
# with the queued harness, the large-M rows call 2's budget cut, and two MLA shapes it cut.
set -x
mkdir -p $OUT/moe $OUT/mla
OUT=$OUT/moe timeout 175 env PYTHONPATH=. python3 benchmarks/kernels.py --only moe --moe-rows 1,2,4,8,16,32,64,1024,4096 --moe-kernels default --no-baselines --budget 160 > $OUT/moe/moe.log 2>&1
tail -12 $OUT/moe/moe.log
OUT=$OUT/mla timeout 100 env PYTHONPATH=. python3 benchmarks/kernels.py --only mla --mla-no-sweep --mla-shapes "1,1,8,131072;8,16,64,4096;1,64,64,131072" --budget 85 > $OUT/mla/mla.log 2>&1
tail -6 $OUT/mla/mla.log
