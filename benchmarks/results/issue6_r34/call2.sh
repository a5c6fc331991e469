# Issue 6, round 34, call 2: the few-token MoE dispatch with planes_consts.py (the constant words and the activation
# planes in one int32 array: one XLA kernel before the MoE kernels instead of two) against the same dispatch before
# it (.base/ holds the two kernel files of the commit before, copied over a copy of the tree in /tmp/base).
# 1 token (two launches) and 4 tokens (one launch), stored and k-chunked 256 experts, kernel times (--device-span);
# then the marked GPU tests of the one-launch kernel whose counters moved (default counters at 4 tokens, flags
# over two rows of constant words at 6 tokens). ~7 minutes (cut to the 695 s of device time left).
mkdir -p $OUT/new $OUT/old; nvidia-smi --query-gpu=name --format=csv
rm -rf /tmp/base && mkdir /tmp/base && cp -r custom_calls benchmarks configs ddtree_jax /tmp/base/ \
  && cp .base/pallas_gemv.py .base/pallas_gemv_pipelined.py /tmp/base/custom_calls/moe_int4/ || exit 1
moe() {   # moe TREE NAME TIMEOUT
  timeout $3 env PYTHONPATH=$1 OUT=$OUT/$2 python3 $1/benchmarks/kernels.py --only moe --no-baselines --device-span 12 \
    --moe-rows 1,4 --moe-configs '[{"kernel": "default", "k_chunk": 256}]' --budget $(( $3 - 25 )) > $OUT/$2.log 2>&1
  echo "$2 rc $?"; grep -E "copy|  moe M=" $OUT/$2.log | cut -c1-300
}
moe . new 150
moe /tmp/base old 150
timeout 120 python3 -m pytest -q -p no:cacheprovider "tests/test_moe_gemv_pipelined.py::test_gpu_kernel[4-256-opts0]" \
  "tests/test_moe_gemv_pipelined.py::test_gpu_kernel[6-256-opts9]" 2>&1 | tail -3
