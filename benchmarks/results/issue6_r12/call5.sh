# Issue 6 twelfth round, GPU call 5 (final code): the MoE dispatch on the k-chunked layout over 1-16 tokens (new
# defaults: prefetch 1 at one token; grouped tiles 32 / 64 up to 12 tokens) against the former grouped tiles;
# the split combine alone with the harness's add moved onto the log-sum-exps; GPU tests of the k-chunked kernels.
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
C='[{"kernel": "default", "k_chunk": 256}, {"kernel": "grouped", "k_chunk": 256, "block_n": 64},
 {"kernel": "grouped", "k_chunk": 256, "block_n": 128}]'
mkdir -p $OUT/moe
timeout 200 env PYTHONPATH=. OUT=$OUT/moe python3 benchmarks/kernels.py --only moe --moe-rows 1,2,4,6,8,10,12,16 \
  --no-baselines --moe-configs "$C" --budget 185 > $OUT/moe.log 2>&1
grep -E "copy|moe M=" $OUT/moe.log | cut -c1-160
timeout 100 env PYTHONPATH=. python3 benchmarks/mla_decode_parts.py --out $OUT/mla_decode_parts.json \
  --shapes "1,1,64,32768;1,1,8,32768" > $OUT/parts.log 2>&1
grep "mla B=" $OUT/parts.log
timeout 90 env PYTHONPATH=. python3 -m pytest -q -m gpu tests/test_kernels_moe.py -k "gpu_kernel and k_chunks and not 600" \
  > $OUT/pytest.log 2>&1
tail -2 $OUT/pytest.log
