# Issue 6 ninth round, GPU call 3 (run 2026-12-04 ~09:45 UTC; results in call3/). Calls 1-2 had moved 64-head decode to the Mosaic kernel.
# 1. The impl="auto" GPU tests under the new rule (Mosaic from T x H >= 64, decode included).
# 2. 64-head decode: the dispatch (now Mosaic at its default split) against the Triton kernel ({}) and other
#    Mosaic splits, at 1K-128K and batch 8, to set mosaic_gpu.default_num_splits for decode.
# Dry run on the CPU: OUT=/tmp/o PYTHONPATH=. python3 benchmarks/kernels.py --smoke --only mla --mla-configs '<same>'
set -x
mkdir -p $OUT/dec64
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
timeout 120 env PYTHONPATH=. python3 -m pytest -q -rA -m gpu tests/test_kernels_mla_mosaic.py -k dispatch \
  > $OUT/pytest.log 2>&1
tail -6 $OUT/pytest.log
OUT=$OUT/dec64 timeout 400 env PYTHONPATH=. python3 benchmarks/kernels.py --only mla \
  --mla-shapes "1,1,64,32768;1,1,64,131072;8,1,64,32768;1,1,64,8192;1,1,64,1024" \
  --mla-configs '[{}, {"kernel": "mosaic", "num_splits": 32}, {"kernel": "mosaic", "num_splits": 64},
  {"kernel": "mosaic", "num_splits": 96}, {"kernel": "mosaic", "num_splits": 264}]' --budget 370 \
  > $OUT/dec64/mla.log 2>&1
grep -E "^\[|^\|" $OUT/dec64/mla.log | cut -c1-900 | tail -12
