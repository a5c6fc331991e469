# Issue 6 ninth round, GPU call 1 (run 2026-12-04 ~03:10 UTC; results in call1/).
# Dry run on the CPU first: `OUT=/tmp/o PYTHONPATH=. python3 benchmarks/kernels.py --smoke --only mla`.
# 1. Every GPU test of the Mosaic MLA kernel, among them the two never run on a GPU: no ptxas spills
#    (test_gpu_kernel_does_not_spill) and f32 / bf16 per-split outputs.
# 2. Decode (T = 1) on the fixed Mosaic kernel against the dispatch (Triton): if Mosaic wins at 64 heads,
#    custom_calls/mla_attention/__init__.py's rule changes (tree_rows -> T x H >= 64 at T = 1 too).
# 3. The compute-bound trees not re-timed since the spill fix (128K) and the 3-us 1 x 16 x 64 x 1K.
set -x
mkdir -p $OUT/dec $OUT/trees
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
timeout 200 env PYTHONPATH=. python3 -m pytest -q -rA -m gpu tests/test_kernels_mla_mosaic.py > $OUT/pytest.log 2>&1
tail -15 $OUT/pytest.log
OUT=$OUT/dec timeout 150 env PYTHONPATH=. python3 benchmarks/kernels.py --only mla \
  --mla-shapes "1,1,64,131072;1,1,64,32768;1,1,8,131072" \
  --mla-configs '[{"kernel": "mosaic"}, {"kernel": "mosaic", "partial_dtype": "float32"}]' --budget 130 \
  > $OUT/dec/mla.log 2>&1
grep -E "^\[|^\|" $OUT/dec/mla.log | tail -8
OUT=$OUT/trees timeout 200 env PYTHONPATH=. python3 benchmarks/kernels.py --only mla --mla-no-sweep \
  --mla-shapes "1,257,64,131072;1,64,64,131072;1,257,8,131072;1,16,64,1024" --budget 180 > $OUT/trees/mla.log 2>&1
grep -E "^\[|^\|" $OUT/trees/mla.log | tail -8
