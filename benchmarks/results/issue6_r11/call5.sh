# Issue 6 eleventh round, GPU call 5: the split combine rewritten (calls 1-2: ~1 TB/s, slower alone than XLA's five
# kernels at 128 splits): all the log-sum-exps of a row tile in one load, then the partials accumulated per split
# slot with one reduction across warps at the end instead of one per step.
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
timeout 60 env PYTHONPATH=. python3 -m pytest -q -m gpu tests/test_mla_split_combine.py > $OUT/pytest.log 2>&1
tail -1 $OUT/pytest.log
timeout 300 env PYTHONPATH=. python3 benchmarks/mla_decode_parts.py --out $OUT/mla_decode_parts.json \
  --shapes "1,1,64,8192;1,1,64,32768;1,1,8,32768" --combine_blocks "1,64,32,4;2,32,32,4;1,128,16,4" \
  > $OUT/parts.log 2>&1
grep "mla B=" $OUT/parts.log
