# Run on commit 0ff5ca8 (load_stages and pipeline_activations were removed after this call, benchmarks/RESULTS.md round 23).
# Issue 6, round 23 (session 28), call 1: the gemv's K loops marked for Triton's pipeliner (custom_calls/loop_stages.py:
# `tt.num_stages` on the scf.for, so that loads are copied into shared memory asynchronously, load_stages - 1 steps
# ahead, without holding registers), every load ("all") or only the words and scales ("w": pipeline_activations
# false, `tt.latency` on those loads). k-chunked 256 (the engine's layout) throughout; the dispatch default on the
# stored layout is printed first by the harness.
mkdir -p $OUT/one $OUT/few; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
g() { echo "{\"kernel\": \"gemv\", \"k_chunk\": 256$1}"; }
W=', "pipeline_activations": false'
C1="[$(g), $(g ', "load_stages": 3, "prefetch": 0'), $(g ", \"load_stages\": 3, \"prefetch\": 0$W"),
 $(g ", \"load_stages\": 5, \"prefetch\": 0$W"), $(g ", \"load_stages\": 3, \"prefetch\": 0, \"block_k_down\": 256$W"),
 $(g ", \"load_stages\": 5, \"prefetch\": 0, \"block_k\": 512, \"block_k_down\": 256$W"),
 $(g ', "load_stages": 4, "prefetch": 0'), $(g)]"
timeout 260 env PYTHONPATH=. OUT=$OUT/one python3 benchmarks/kernels.py --only moe --moe-rows 1 --no-baselines \
  --moe-configs "$C1" --budget 245 > $OUT/one.log 2>&1
C2="[$(g), $(g ', "load_stages": 3'), $(g ", \"load_stages\": 3$W"), $(g ", \"load_stages\": 5, \"block_k\": 512, \"block_k_down\": 256$W"), $(g)]"
timeout 120 env PYTHONPATH=. OUT=$OUT/few python3 benchmarks/kernels.py --only moe --moe-rows 2,4 --no-baselines \
  --moe-configs "$C2" --budget 105 > $OUT/few.log 2>&1
grep -E "copy|  moe M=" $OUT/one.log $OUT/few.log | cut -c1-300
