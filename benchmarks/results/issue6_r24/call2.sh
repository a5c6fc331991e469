# Issue 6, round 24 (session 29), call 2: the one-token gemv with its K loop loading more steps ahead
# (pallas_gemv prefetch_steps A: A + 1 of the gate/up kernel's 7 K steps in flight per program). Call 4 of round 23
# (ncu, H100): at one token the gate/up grid is 0.6 waves (512 programs, 24% occupancy, 80 registers), DRAM 36% busy,
# 59% of warp stalls on long scoreboard (waiting for global loads), i.e. too few bytes in flight per SM; registers
# have room (about 4 programs per SM). k-chunked 256 (the engine's layout); the dispatch's default (A = 1) alternated
# with A = 3 and 6 (all 7 at once); then 2 tokens (default prefetch 0) against prefetch 1 with A = 3.
mkdir -p $OUT/one $OUT/two; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
g() { echo "{\"kernel\": \"gemv\", \"k_chunk\": 256$1}"; }
C1="[$(g), $(g ', "prefetch_steps": 3'), $(g ', "prefetch_steps": 6'), $(g), $(g ', "prefetch_steps": 3')]"
timeout 230 env PYTHONPATH=. OUT=$OUT/one python3 benchmarks/kernels.py --only moe --moe-rows 1 --no-baselines \
  --moe-configs "$C1" --budget 215 > $OUT/one.log 2>&1
C2="[$(g), $(g ', "prefetch": 1, "prefetch_steps": 3'), $(g), $(g ', "prefetch": 1, "prefetch_steps": 3')]"
timeout 80 env PYTHONPATH=. OUT=$OUT/two python3 benchmarks/kernels.py --only moe --moe-rows 2 --no-baselines \
  --moe-configs "$C2" --budget 65 > $OUT/two.log 2>&1
grep -E "copy|  moe M=" $OUT/one.log $OUT/two.log | cut -c1-300
