# NOT RUN (no device time was left; call3b.sh ran its first two configs). Issue 6, round 28 (session 33), call 3: the one-launch kernel at 10 tokens, where round 27 found it slower than the
# grouped kernels (161.8 against 116.6 us), with the down tile halved (4 rows: twice the down programs) and with
# gate/up tiles of 8 rows, next to the dispatch (grouped kernels above 8 tokens). k-chunked 256 experts.
mkdir -p $OUT; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
P='{"kernel": "gemv_pipelined", "k_chunk": 256'
C="[{\"kernel\": \"default\", \"k_chunk\": 256}, $P}, $P, \"block_n_down\": 4}, $P, \"block_n\": 8}]"
mkdir -p $OUT/t10; timeout 400 env PYTHONPATH=. OUT=$OUT/t10 python3 benchmarks/kernels.py --only moe --moe-rows 10 \
  --no-baselines --moe-configs "$C" --budget 380 > $OUT/t10.log 2>&1
grep -E "copy|  moe M=" $OUT/t10.log | cut -c1-220
