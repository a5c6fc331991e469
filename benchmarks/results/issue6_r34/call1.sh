# Issue 6, round 34, call 1. In order of importance, each part with its own timeout (580 s in all; run with the run
# tool's timeout_s 600):
#  1. dispatch_hlo.py: the optimised HLO of the 1-token MoE dispatch, to name the XLA kernels before its MoE kernels
#     (round 33: a 0.9-us "loop_multiply_fusion" that is not the activation planes);
#  2. batch-1 MLA decode at 32K / 8K / 1K with kernel times (round 33's bool-mask kernel: no convert before it);
#  3. round 33's call2: the 1-token read-only bounds with the waits (speed_of_light.py);
#  4. the dispatch at 1 token against the one-launch gemv with the flag wait (wait_flags 64): first without the
#     1-token default prefetch 1 (from Triton IR on this 2-core CPU it then compiles in 95 s instead of 7 min 19 s),
#     next to the two launches without it, then with it, for as long as the part's timeout lets its compile run.
mkdir -p $OUT/moe $OUT/mla; nvidia-smi --query-gpu=name --format=csv   # (8 files come back at most: 7 written)
timeout 90 env PYTHONPATH=. python3 benchmarks/dispatch_hlo.py --tokens 1 --k_chunk 256 \
  --out $OUT/dispatch_hlo.txt > /tmp/hlo.log 2>&1
echo "hlo rc $?"; grep -vE "^ +%param|^%[a-z_0-9.]+ = [a-z0-9]+\[[0-9,]*\]\{?[0-9,]*\}? parameter" /tmp/hlo.log | cut -c1-260 | head -60
timeout 80 env PYTHONPATH=. OUT=$OUT/mla python3 benchmarks/kernels.py --only mla --mla-no-sweep --device-span 12 \
  --budget 60 --mla-shapes "1,1,8,32768;1,1,8,8192;1,1,8,1024" > $OUT/mla.log 2>&1
echo "mla rc $?"; grep -E "copy|^\| 1 \| 1 \|" $OUT/mla.log | cut -c1-300
timeout 140 env PYTHONPATH=. python3 benchmarks/speed_of_light.py --moe_tokens 1 --mla_ctx '' --moe_configs 1 \
  --moe_variants read_2,read_1,read_1_spin,read_1_flags,read_1_flags_volatile --device_span 12 \
  --out $OUT/speed_of_light.json > $OUT/sol.log 2>&1
echo "sol rc $?"; grep -E "copy|error|^\| " $OUT/sol.log | cut -c1-300
timeout 265 env PYTHONPATH=. OUT=$OUT/moe python3 benchmarks/kernels.py --only moe --no-baselines --device-span 12 \
  --moe-rows 1 --moe-configs '[{"kernel": "default", "k_chunk": 256},
    {"kernel": "gemv_pipelined", "k_chunk": 256, "wait_flags": 64, "prefetch": 0},
    {"kernel": "gemv", "k_chunk": 256, "prefetch": 0},
    {"kernel": "gemv_pipelined", "k_chunk": 256, "wait_flags": 64}]' --budget 245 > $OUT/moe.log 2>&1
echo "moe rc $?"; grep -E "copy|  moe M=" $OUT/moe.log | cut -c1-300
