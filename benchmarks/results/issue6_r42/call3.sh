# Issue 6 round 42, call 3. On an H200 (gpu.txt says which): the MLA half of round 38's next_h200.sh, the standing
# table's decode grid (the H200 was last timed in round 19; the MoE half does not fit in the device time left).
# On an H100: call 2 found 1 x 1 x 64 heads x 12K (64 rows, one token) at 19.1 us under the dispatch (short-wide
# Triton launch) against Mosaic's 18.8, while the tree shapes of 64 rows won at 12K; this repeats the one-token
# shapes at 10K-12K and adds 2 tokens x 32 heads, to decide whether the 12K bound should hold only for tree tokens.
# Timeout 260.
mkdir -p $OUT/t; nvidia-smi --query-gpu=name --format=csv | tee $OUT/gpu.txt
if grep -q H200 $OUT/gpu.txt; then
  timeout 170 env PYTHONPATH=. OUT=$OUT/t python3 benchmarks/kernels.py --only mla --mla-no-sweep --budget 160 \
    --device-span 12 --mla-shapes "1,1,8,131072;1,1,64,131072;8,1,8,32768;1,1,8,32768;1,1,64,32768;1,1,8,8192;1,1,64,8192;1,1,8,1024;1,4,8,32768" \
    > $OUT/t.log 2>&1
  echo "mla rc $?"; grep -E "copy|mla B=" $OUT/t.log | cut -c1-500
else
  timeout 200 env PYTHONPATH=. OUT=$OUT/t python3 benchmarks/kernels.py --only mla --mla-no-sweep --budget 190 \
    --device-span 12 --mla-shapes "1,1,64,12288;1,1,64,10240;1,2,32,12288;1,1,64,12288" \
    --mla-configs '[{"kernel": "mosaic"}]' > $OUT/t.log 2>&1
  echo "timing rc $?"; grep -E "copy|mla B=" $OUT/t.log | cut -c1-900
fi
