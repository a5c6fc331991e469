# Issue 6, round 34, call 3 (for the next session's first GPU call; call 2 is the cut version that never ran).
# planes_consts.py (the constant words and the activation planes in one int32 array) against the commit before it
# (.base/ holds that commit's pallas_gemv.py and pallas_gemv_pipelined.py: run with carry [".base"], after
#   mkdir -p .base && git show 9b6ba69:custom_calls/moe_int4/pallas_gemv.py > .base/pallas_gemv.py &&
#   git show 9b6ba69:custom_calls/moe_int4/pallas_gemv_pipelined.py > .base/pallas_gemv_pipelined.py
# and "/.base/" in .git/info/exclude). In order of importance, ~9.5 minutes (run with timeout_s 600):
#  1. the dispatch at 1, 2, 4 and 6 tokens, k-chunked 256, kernel times (--device-span), new then old: one XLA kernel
#     before the MoE kernels instead of two, and whether the gate/up K loop's 4 more instructions cost anything;
#  2. the marked GPU tests of the one-launch kernel, whose counters moved (4 tokens; 6 tokens with 64 flags, over two
#     rows of constant words) and of the two-launch gemv at 1 token;
#  3. the optimised HLO of the new dispatch at 1 and 4 tokens.
mkdir -p $OUT/new $OUT/old; nvidia-smi --query-gpu=name --format=csv
rm -rf /tmp/base && mkdir /tmp/base && cp -r custom_calls benchmarks configs ddtree_jax /tmp/base/ \
  && cp .base/pallas_gemv.py .base/pallas_gemv_pipelined.py /tmp/base/custom_calls/moe_int4/ || exit 1
moe() {   # moe TREE NAME TIMEOUT
  timeout $3 env PYTHONPATH=$1 OUT=$OUT/$2 python3 $1/benchmarks/kernels.py --only moe --no-baselines --device-span 12 \
    --moe-rows 1,2,4,6 --moe-configs '[{"kernel": "default", "k_chunk": 256}]' --budget $(( $3 - 25 )) \
    > $OUT/$2.log 2>&1
  echo "$2 rc $?"; grep -E "copy|  moe M=" $OUT/$2.log | cut -c1-300
}
moe . new 200
moe /tmp/base old 200
timeout 120 python3 -m pytest -q -p no:cacheprovider "tests/test_moe_gemv_pipelined.py::test_gpu_kernel[4-256-opts0]" \
  "tests/test_moe_gemv_pipelined.py::test_gpu_kernel[6-256-opts9]" 2>&1 | tail -3
timeout 50 env PYTHONPATH=. python3 benchmarks/dispatch_hlo.py --tokens 1,4 --k_chunk 256 \
  --out $OUT/dispatch_hlo.txt > /tmp/hlo.log 2>&1
echo "hlo rc $?"; grep -E "^==|fusion\(|custom-call|^%copy" /tmp/hlo.log | cut -c1-200 | head -30
