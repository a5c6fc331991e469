# Issue 6, round 29 (session 34), call 3 (same warm machine as call 2): the grouped one-launch kernel again at 10 and
# 32 tokens (a second run), and at 64, 128 and 6 tokens, against the dispatch, k-chunked 256 experts.
mkdir -p $OUT/t; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
C='[{"kernel": "default", "k_chunk": 256}, {"kernel": "grouped_one_launch", "k_chunk": 256}]'
timeout 330 env PYTHONPATH=. OUT=$OUT/t python3 benchmarks/kernels.py --only moe --moe-rows 64,128,10,32,512,6 \
  --no-baselines --moe-configs "$C" --budget 310 > $OUT/t.log 2>&1
echo "kernels rc $?"; grep -E "copy|  moe M=" $OUT/t.log | cut -c1-220
