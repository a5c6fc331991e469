# Run on commit 724736a (f16_dots was removed after this call, benchmarks/RESULTS.md round 23).
# Issue 6, round 23 (session 28), call 2: the gemv's gate/up kernel with half2 word dots (f16_word_dots.py, option
# f16_dots: 161 instructions a K-loop trip at one token against 260, sm_90 SASS compiled without a GPU). GPU tests of
# the PTX first; then k-chunked 256 (the engine's layout) at 1, 2 and 4 tokens, default / f16_dots alternated.
mkdir -p $OUT/one $OUT/few; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
timeout 100 env PYTHONPATH=. python3 -m pytest -q -m gpu tests/test_f16_word_dots.py > $OUT/pytest.log 2>&1; tail -3 $OUT/pytest.log
g() { echo "{\"kernel\": \"gemv\", \"k_chunk\": 256$1}"; }
F=', "f16_dots": true'
C1="[$(g), $(g "$F"), $(g), $(g "$F"), $(g "$F, \"prefetch\": 0")]"
timeout 200 env PYTHONPATH=. OUT=$OUT/one python3 benchmarks/kernels.py --only moe --moe-rows 1 --no-baselines \
  --moe-configs "$C1" --budget 185 > $OUT/one.log 2>&1
C2="[$(g), $(g "$F"), $(g), $(g "$F")]"
timeout 110 env PYTHONPATH=. OUT=$OUT/few python3 benchmarks/kernels.py --only moe --moe-rows 2,4 --no-baselines \
  --moe-configs "$C2" --budget 95 > $OUT/few.log 2>&1
grep -E "copy|  moe M=" $OUT/one.log $OUT/few.log | cut -c1-300
