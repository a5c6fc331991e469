# Issue 6, round 31, call 4: the shapes still short of the targets (MoE at 1 and 2 tokens; batch-1 MLA decode at
# 8K and 32K (8 heads), and 128K as a control that meets its target), timed twice: kernels.py's chain (time_s: the chain's add + reduction are in it, harness_floor) and the
# device time of one call alone (--device-span 12: device_span.py, a profiler trace of 12 blocking calls, first
# kernel start to last kernel end). Same processes, same inputs (rotating sets). One process each.
mkdir -p $OUT/moe $OUT/mla; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
timeout 120 env PYTHONPATH=. OUT=$OUT/moe python3 benchmarks/kernels.py --only moe --no-baselines --device-span 12 \
  --moe-rows 1,2 --moe-configs '[{"kernel": "default", "k_chunk": 256}]' --budget 100 > $OUT/moe.log 2>&1
echo "moe rc $?"; grep -E "copy|  moe M=" $OUT/moe.log | cut -c1-260
timeout 90 env PYTHONPATH=. OUT=$OUT/mla python3 benchmarks/kernels.py --only mla --mla-no-sweep --device-span 12 \
  --budget 70 --mla-shapes "1,1,8,32768;1,1,8,131072;1,1,8,8192" \
  > $OUT/mla.log 2>&1
echo "mla rc $?"; grep -E "copy|^\| 1 \| 1 \|" $OUT/mla.log | cut -c1-300
