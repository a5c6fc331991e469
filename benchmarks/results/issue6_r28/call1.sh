# Issue 6, round 28 (session 33), call 1: the one-launch kernel's GPU tests that round 27 added after its GPU time ran
# out (lag 1, the ticket; every case twice in one program with a literal offset), with the three that ran then.
mkdir -p $OUT; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
timeout 480 env PYTHONPATH=. python3 -m pytest -q -rA -m gpu tests/test_moe_gemv_pipelined.py --durations=0 \
  > $OUT/pytest.log 2>&1
tail -15 $OUT/pytest.log
