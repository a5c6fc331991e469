# Issue 6, round 27 (session 32), call 1: the few-token MoE in one launch (pallas_gemv_pipelined.py) against the
# dispatch, on k-chunked 256 experts (the engine's GPU layout), at 6, 8 and 4 tokens (in that order). Pipelined with lag 1 and 2
# (token t's down programs after token t + lag's gate/up programs), and with lag 1 and each program's place taken
# from an atomic ticket. (Lag 1 was the default when this ran; it is named here since the default became N.)
# kernels.py checks each config against the XLA reference before timing it.
mkdir -p $OUT; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
P='{"kernel": "gemv_pipelined", "k_chunk": 256'
C="[{\"kernel\": \"default\", \"k_chunk\": 256}, $P, \"lag\": 1}, $P, \"lag\": 2}, $P, \"lag\": 1, \"ticket\": true}]"
mkdir -p $OUT/r1
timeout 560 env PYTHONPATH=. OUT=$OUT/r1 python3 benchmarks/kernels.py --only moe --moe-rows 6,8,4 --no-baselines \
  --moe-configs "$C" --budget 520 > $OUT/r1.log 2>&1
grep -E "copy|  moe M=" $OUT/r1.log | cut -c1-220
