# Issue 6 seventh round, GPU call 2: the Mosaic GPU MLA kernel after the register fix (unscaled P0 shared,
# no f32 P kept across a product, per-half kv refills by each half's last reader): GPU tests + ptxas report,
# then every compute-bound / 64-head shape with its default split, twice and half that, next to the Triton default.
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
MOSAIC_GPU_DUMP_PTXAS=1 timeout 120 env PYTHONPATH=. python3 -m pytest -q -s -rA --tb=long -m gpu tests/test_kernels_mla_mosaic.py > $OUT/mosaic_pytest.log 2>&1
grep -i -E "spill|registers|passed|failed|error" $OUT/mosaic_pytest.log | head -30
mkdir -p $OUT/mla
OUT=$OUT/mla MOSAIC_GPU_DUMP_PTXAS=1 timeout 420 env PYTHONPATH=. python3 benchmarks/kernels.py --only mla --mla-mosaic --mla-shapes "1,257,64,32768;1,257,8,32768;1,64,8,32768;8,16,64,4096;1,1,64,131072;1,64,64,131072;1,16,64,1024;1,257,8,131072" --budget 390 > $OUT/mla/mla.log 2>&1
grep -E "^\[|^\|" $OUT/mla/mla.log | tail -24
grep -c "spill" $OUT/mla/mla.log
