# Issue 6, round 22 (session 27), call 4: call 3's single samples left the engine's layout (k-chunked 256) open at
# 2 and 4 tokens: nibble 4 in place vs from the shifted word for both kernels, each config twice (alternated), with
# the stored layout's two for reference.
mkdir -p $OUT/r; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
g() { echo "{\"kernel\": \"gemv\", \"nibble4_in_place\": [$1, $1]$2}"; }
K=', "k_chunk": 256'
C="[$(g false "$K"), $(g true "$K"), $(g false "$K"), $(g true "$K"), $(g false), $(g true)]"
timeout 170 env PYTHONPATH=. OUT=$OUT/r python3 benchmarks/kernels.py --only moe --moe-rows 2,4 --no-baselines \
  --moe-configs "$C" --budget 155 > $OUT/r.log 2>&1
grep -E "copy|  moe M=" $OUT/r.log | cut -c1-300
