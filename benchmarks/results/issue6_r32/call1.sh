# Issue 6, round 32 (session 37), call 1: round 31's call4.sh (prepared, never run) with 3 and 6 tokens and 1K of
# decode context added. The shapes still short of the targets (MoE at 1-6 tokens; batch-1 MLA decode at
# 1K-32K) and 128K as a control that meets its target, each timed twice in one process: kernels.py's chain (time_s:
# the chain's add + reduction are in it, harness_floor) and the device time of one call alone (--device-span 12:
# device_span.py, a profiler trace of 12 blocking calls, first kernel start to last kernel end, with each kernel's
# median duration). ~8 minutes on one GPU.
mkdir -p $OUT/moe $OUT/mla; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
timeout 330 env PYTHONPATH=. OUT=$OUT/moe python3 benchmarks/kernels.py --only moe --no-baselines --device-span 12 \
  --moe-rows 1,2,3,4,6 --moe-configs '[{"kernel": "default", "k_chunk": 256}]' --budget 300 > $OUT/moe.log 2>&1
echo "moe rc $?"; grep -E "copy|  moe M=" $OUT/moe.log | cut -c1-300
timeout 200 env PYTHONPATH=. OUT=$OUT/mla python3 benchmarks/kernels.py --only mla --mla-no-sweep --device-span 12 \
  --budget 170 --mla-shapes "1,1,8,32768;1,1,8,8192;1,1,8,131072;1,1,64,32768;1,1,8,1024" > $OUT/mla.log 2>&1
echo "mla rc $?"; grep -E "copy|^\| 1 \| 1 \|" $OUT/mla.log | cut -c1-300
