# Issue 6 tenth round, GPU call 3: the k-chunked layout as the model runs it.
# 1. GPU tests: both kernels on k-chunked arrays (the gemv's 1024-input K step now reads 4 chunks as a
#    [4, BN, 32] tile), and the embedded model end to end (its Engine now re-lays the experts k-chunked on
#    a GPU) against the XLA reference's tokens.
# 2. The dispatch's defaults over the whole token range on the stored layout and on chunk 256.
set -x
mkdir -p $OUT/moe
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
timeout 240 env PYTHONPATH=. python3 -m pytest -q -m gpu tests/test_kernels_moe.py tests/test_kernels_e2e.py \
  -k "k_chunks or e2e or match_reference_tokens" > $OUT/pytest.log 2>&1
tail -3 $OUT/pytest.log
OUT=$OUT/moe timeout 300 env PYTHONPATH=. python3 benchmarks/kernels.py --only moe \
  --moe-rows 1,2,4,8,16,32,64,128,256,512,1024,2048,4096 --no-baselines --budget 280 \
  --moe-configs '[{"kernel": "default", "k_chunk": 256}]' > $OUT/moe/moe.log 2>&1
grep -E "^\|" $OUT/moe/moe.log | tail -14
