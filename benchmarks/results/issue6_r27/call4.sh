# Issue 6, round 27 (session 32), call 4: the one-launch kernel's GPU tests (tests/test_moe_gemv_pipelined.py, marked
# gpu) at the K2.6 shard's shapes with a realistic routing (ids in 0..95: several local pairs a token, repeats), so
# that tokens' gate/up programs do unequal work before the down programs wait on them. 8 tokens k-chunked and 6 tokens
# stored (the dispatch's default lag N).
mkdir -p $OUT; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
timeout 150 env PYTHONPATH=. python3 -m pytest -q -rA -m gpu tests/test_moe_gemv_pipelined.py -k "8-256 or 6-None" \
  > $OUT/pytest.log 2>&1
tail -8 $OUT/pytest.log

# Then, on the same warm machine (results in call4/pytest_4.log):
# timeout 90 env PYTHONPATH=. python3 -m pytest -q -rA -m gpu tests/test_moe_gemv_pipelined.py -k "4-256"
