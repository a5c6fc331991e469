# Issue 6, round 36, call 4: checks the two new defaults of this round on the GPU. Timeout 540.
#  1. the GPU tests of the new paths: the one-launch gemv at 3 tokens; the MLA decode with 3 stages (1 x 8 x 32K);
#  2. the MLA dispatch (now 3 stages where default_num_stages says so) against num_stages 2 at the decode shapes the
#     rule changes (32K, 64K, batch 2, 2 tokens x 8 heads) and two it leaves alone (16K, 128K);
#  3. the MoE dispatch at 3 tokens (now the one-launch kernel: 2 kernels where there were 3).
mkdir -p $OUT/dec $OUT/three; nvidia-smi --query-gpu=name --format=csv | tee $OUT/gpu.txt
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kernels_mla.py \
  "tests/test_moe_gemv_pipelined.py::test_gpu_kernel[3-256-opts0]" 2>&1 | tail -3
# (That case was first in the list when this ran; it has since moved last, [3-256-opts10], so that older ids hold.)
timeout 200 env PYTHONPATH=. OUT=$OUT/dec python3 benchmarks/kernels.py --only mla --mla-no-sweep --budget 185 \
  --device-span 12 --mla-shapes "1,1,8,32768;1,1,8,65536;2,1,8,32768;1,2,8,32768;1,1,8,16384;1,1,8,131072" \
  --mla-configs '[{"num_stages": 2}]' > $OUT/dec.log 2>&1
echo "dec rc $?"; grep -E "copy|mla B=" $OUT/dec.log | cut -c1-600
timeout 150 env PYTHONPATH=. OUT=$OUT/three python3 benchmarks/kernels.py --only moe --no-baselines --device-span 12 \
  --moe-rows 3 --budget 130 --moe-configs '[{"kernel": "default", "k_chunk": 256}]' > $OUT/three.log 2>&1
echo "three rc $?"; grep -E "copy|  moe M=" $OUT/three.log | cut -c1-300
