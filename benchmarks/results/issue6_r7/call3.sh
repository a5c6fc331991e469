# Issue 6 seventh round, GPU call 3: the MLA dispatch now runs the Mosaic GPU kernel from 64 query rows on
# (floor split rule). GPU tests of both MLA kernels and the dispatch, then the whole MLA grid through
# the dispatch (config {} = custom_calls.mla_attention impl "auto").
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
timeout 110 env PYTHONPATH=. python3 -m pytest -q -rA -m gpu tests/test_kernels_mla_mosaic.py tests/test_kernels_mla.py > $OUT/pytest.log 2>&1
grep -E "PASSED|FAILED|ERROR|passed|failed" $OUT/pytest.log | tail -14
mkdir -p $OUT/mla
OUT=$OUT/mla timeout 360 env PYTHONPATH=. python3 benchmarks/kernels.py --only mla --mla-no-sweep --budget 330 > $OUT/mla/mla.log 2>&1
grep -E "^\[|^\|" $OUT/mla/mla.log | tail -20
