# Issue 6, round 22 (session 27), call 3: calls 1-2 (the dispatch default, H100) found nibble 4 masked in place
# faster at 2 and 4 tokens and slower at one token. Which kernel? The gemv with nibble4_in_place per kernel
# (gate/up, down), stored layout and k-chunked (the engine's GPU layout), at 1, 2 and 4 tokens.
mkdir -p $OUT/r; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
g() { echo "{\"kernel\": \"gemv\", \"nibble4_in_place\": [$1, $2]$3}"; }
C="[$(g false false), $(g true false), $(g false true), $(g true true), $(g false false ', "k_chunk": 256'), $(g true true ', "k_chunk": 256')]"
timeout 270 env PYTHONPATH=. OUT=$OUT/r python3 benchmarks/kernels.py --only moe --moe-rows 1,2,4 --no-baselines \
  --moe-configs "$C" --budget 250 > $OUT/r.log 2>&1
grep -E "copy|  moe M=" $OUT/r.log | cut -c1-300
