# Ran at commit 44d4980; the persistent kernel and planes_in_kernel were removed after this run (both slower at one
# token, RESULTS twentieth round).
# Issue 6, round 20 (session 25), call 1: the persistent few-token MoE kernel (pallas_persistent.py: gate/up, a
# grid-wide barrier, down in one launch, activation planes made in registers) and the gemv reading x as given
# (planes_in_kernel), against the dispatch's default on the same k-chunked experts, at one token. GPU tests first
# (the barrier's single launch, and a grid too large to be resident giving NaN instead of a hang).
mkdir -p $OUT/moe; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
timeout 170 env PYTHONPATH=. python3 -m pytest -p no:cacheprovider -m gpu -q tests/test_kernels_moe_persistent.py \
  > $OUT/gpu_tests.log 2>&1; echo "pytest rc $?" >> $OUT/gpu_tests.log; tail -5 $OUT/gpu_tests.log
timeout 330 env PYTHONPATH=. OUT=$OUT/moe python3 benchmarks/kernels.py --only moe --moe-rows 1 --no-baselines \
  --moe-configs '[{"kernel": "default", "k_chunk": 256}, {"kernel": "gemv", "k_chunk": 256, "planes_in_kernel": true},
  {"kernel": "persistent", "k_chunk": 256}, {"kernel": "persistent", "k_chunk": 256, "programs_per_sm": 2},
  {"kernel": "persistent", "k_chunk": 256, "block_n_down": 16}, {"kernel": "default", "k_chunk": 256}]' \
  --budget 300 > $OUT/moe.log 2>&1
grep -E "copy|moe M=" $OUT/moe.log | cut -c1-1800; tail -3 $OUT/moe.log | cut -c1-300
