# Issue 6, round 29 (session 34), call 1: the current dispatch on the machine (asked for as nvidia-h200; the
# reply says which card ran it). Rounds 20-28 changed the few-token MoE path and timed it on H100s only. The MoE
# dispatch over 1-64 tokens on the stored layout (timed first by kernels.py) and on k-chunked 256 experts (the
# engine's layout on a GPU), then the batch-1 / batch-8 decode shapes under the MLA dispatch. One process each.
mkdir -p $OUT/moe $OUT/mla; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
timeout 420 env PYTHONPATH=. OUT=$OUT/moe python3 benchmarks/kernels.py --only moe --no-baselines \
  --moe-rows 1,2,3,4,6,8,10,16,32,64 --moe-configs '[{"kernel": "default", "k_chunk": 256}]' --budget 390 \
  > $OUT/moe.log 2>&1
echo "moe rc $?"; grep -E "copy|  moe M=" $OUT/moe.log | cut -c1-220
timeout 150 env PYTHONPATH=. OUT=$OUT/mla python3 benchmarks/kernels.py --only mla --mla-no-sweep --budget 130 \
  --mla-shapes "1,1,8,8192;1,1,8,32768;1,1,8,131072;1,1,64,32768;8,1,8,32768;1,1,8,1024" > $OUT/mla.log 2>&1
echo "mla rc $?"; grep -E "copy|^\| [18] \| 1 \|" $OUT/mla.log | cut -c1-220
