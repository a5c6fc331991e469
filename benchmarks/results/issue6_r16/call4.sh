# Issue 6, prepared in session 18 (no GPU was lent that session; NOT RUN). The INT4 experts on tensor cores for 1-16
# tokens (custom_calls/moe_int4/mosaic_experts.py, Pallas Mosaic GPU): written and tested on the CPU only (interpret
# mode, and lowered for CUDA at the K2.6 shard), never compiled by ptxas nor timed. This call:
# 1. its GPU tests (the compiled kernels against the reference at the K2.6 shard), with ptxas's register and spill
#    report (MOSAIC_GPU_DUMP_PTXAS, as test_kernels_mla_mosaic.py uses it) in tests.log;
# 2. the dispatch (k-chunked: Triton gemv up to 6 tokens, grouped above) against the Mosaic kernels at 1, 4, 9 (a
#    DDTree N=8 verify) and 16 tokens, default first and last (the run's spread): the defaults, wgmma_in_flight 1
#    (the next tile's conversion overlaps this tile's wgmma), 6 stages, K steps of 512 (gate/up split 7 ways),
#    gate/up unsplit, down split in two, one and 16 slot lanes, and wgmma_order (weights stored so that the loaded
#    registers are the wgmma operand: no shuffles).
# If the Mosaic kernels win at some token counts, the next step is the model's load-time layout (a --moe_layout
# for mosaic_layout.to_mosaic_layout) and the dispatch bound; if a test fails, tests.log says where.
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
timeout 200 env MOSAIC_GPU_DUMP_PTXAS=1 python3 -m pytest -q -p no:cacheprovider -m gpu \
  tests/test_kernels_moe_mosaic.py > $OUT/tests.log 2>&1
tail -5 $OUT/tests.log; grep -E "registers|spill" $OUT/tests.log | sort | uniq -c | head -20
C='[{"kernel": "default", "k_chunk": 256}, {"kernel": "mosaic"}, {"kernel": "mosaic", "wgmma_order": true},
 {"kernel": "mosaic", "wgmma_in_flight": 1}, {"kernel": "mosaic", "stages": 6},
 {"kernel": "mosaic", "block_k": 512, "k_splits": 7}, {"kernel": "mosaic", "k_splits": 1},
 {"kernel": "mosaic", "k_splits_down": 2}, {"kernel": "mosaic", "slot_lanes": 1}, {"kernel": "mosaic", "slot_lanes": 16},
 {"kernel": "default", "k_chunk": 256}]'
mkdir -p $OUT/moe
timeout 380 env PYTHONPATH=. OUT=$OUT/moe python3 benchmarks/kernels.py --only moe --moe-rows 1,4,9,16 \
  --no-baselines --moe-configs "$C" --budget 360 > $OUT/moe.log 2>&1
grep -E "copy|moe M=" $OUT/moe.log | cut -c1-1500
