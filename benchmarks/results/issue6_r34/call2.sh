# Issue 6, round 34, call 2: the few-token MoE dispatch with planes_consts.py (the constant words and the activation
# planes in one int32 array: one XLA kernel before the MoE kernels instead of two) against the same dispatch before
# it (.base/ holds the two kernel files of the commit before, copied over a copy of the tree in /tmp/base).
# 1 token (two launches) and 4 tokens (one launch), the stored layout, kernel times (--device-span), each output
# checked against the reference. ~4 minutes (cut to fit the 324 s of device time left; the old part last, cut by the budget if it must).
mkdir -p $OUT/new $OUT/old; nvidia-smi --query-gpu=name --format=csv
rm -rf /tmp/base && mkdir /tmp/base && cp -r custom_calls benchmarks configs ddtree_jax /tmp/base/ \
  && cp .base/pallas_gemv.py .base/pallas_gemv_pipelined.py /tmp/base/custom_calls/moe_int4/ || exit 1
moe() {   # moe TREE NAME TIMEOUT
  timeout $3 env PYTHONPATH=$1 OUT=$OUT/$2 python3 $1/benchmarks/kernels.py --only moe --no-baselines --device-span 12 \
    --moe-rows 1,4 --moe-kernels default --budget $(( $3 - 25 )) > $OUT/$2.log 2>&1
  echo "$2 rc $?"; grep -E "copy|  moe M=" $OUT/$2.log | cut -c1-300
}
moe . new 120
moe /tmp/base old 110
