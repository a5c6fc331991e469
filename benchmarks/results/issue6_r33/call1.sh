# Issue 6, round 33, call 1 (everything in one call: GPU starts are scarce). In order of importance, each part with
# its own timeout (590 s in all; run with the run tool's timeout_s 600):
#  1. flags_debug.py: round 32's fix (the flags set by an atomic exchange) on the GPU: every flag set, no NaN output;
#  2. the marked GPU tests of what changed: the MLA Triton kernel now reads the bool tree mask itself, and the
#     one-launch gemv's flag wait (wait_flags);
#  3. the dispatch at 1 and 4 tokens against the one-launch gemv with the flag wait (wait_flags 64; at 1 token one
#     launch instead of the dispatch's two), kernel times of blocking and queued calls (--device-span);
#  4. planes_forms.py: the two XLA kernels before the MoE kernels (the activation planes): can they be one?
#  5. batch-1 MLA decode at 32K / 8K / 1K with kernel times (the convert before the attention kernel should be gone).
mkdir -p $OUT/moe $OUT/mla; nvidia-smi --query-gpu=name --format=csv   # (8 files come back at most: 7 written)
R32=benchmarks/results/issue6_r32
timeout 60 env PYTHONPATH=. python3 $R32/flags_debug.py 2>&1 | grep -E "^read"
timeout 180 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_mla.py tests/test_moe_gemv_pipelined.py \
  -k gpu 2>&1 | tail -4
timeout 170 env PYTHONPATH=. OUT=$OUT/moe python3 benchmarks/kernels.py --only moe --no-baselines --device-span 12 \
  --moe-rows 1,4 --moe-configs '[{"kernel": "default", "k_chunk": 256},
    {"kernel": "gemv_pipelined", "k_chunk": 256, "wait_flags": 64}]' --budget 150 > $OUT/moe.log 2>&1
echo "moe rc $?"; grep -E "copy|  moe M=" $OUT/moe.log | cut -c1-300
timeout 100 env PYTHONPATH=. python3 benchmarks/planes_forms.py --tokens 1,4,64 --out $OUT/planes_forms.json \
  > $OUT/planes.log 2>&1
echo "planes rc $?"; grep -E "^planes|^dispatch|rror" $OUT/planes.log | cut -c1-400
timeout 80 env PYTHONPATH=. OUT=$OUT/mla python3 benchmarks/kernels.py --only mla --mla-no-sweep --device-span 12 \
  --budget 60 --mla-shapes "1,1,8,32768;1,1,8,8192;1,1,8,1024" > $OUT/mla.log 2>&1
echo "mla rc $?"; grep -E "copy|^\| 1 \| 1 \|" $OUT/mla.log | cut -c1-300
