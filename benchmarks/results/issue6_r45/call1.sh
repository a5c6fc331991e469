# Issue 6 round 45, call 1 (timeout 600; H100 or H200, gpu.txt says which). The 1-token MoE with its down projection
# in Mosaic GPU, the first expert's words copied before the kernel's own dependent-launch wait
# (custom_calls/moe_int4/mosaic_down_prewait.py; gate/up is the gemv's Triton kernel, triggering its dependents first).
# 1. The marked GPU tests: the prewait kernels against the reference and bit for bit against their plain launches
#    (tests/test_moe_prewait_down.py), and round 44's trigger_dependents bits (tests/test_dependent_launch.py).
# 2. Busy time at one token, A/B/A in one process after the dispatch (two gemv launches, k-chunked 256): prewait with
#    the trigger; the same kernels as plain launches (no prewait, no trigger); prewait with two warpgroups (each half
#    of the K steps); the gemv with round 44's trigger; prewait again; then mosaic_experts.py (wgmma_order), whose
#    kernel list gives the time of a Mosaic tensor-core gate/up kernel at one token (is a Mosaic gate/up worth
#    building, which would need no planes kernel?).
#    `bash call1.sh small` (about 420 s of device time): the prewait tests only, and the A/B/A without the two
#    warpgroups, the gemv's trigger and mosaic_experts.
nvidia-smi --query-gpu=name --format=csv | tee $OUT/gpu.txt
if [ "$1" = small ]; then
  tests="tests/test_moe_prewait_down.py"; test_s=120; budget=220
  configs='[{"kernel": "default", "k_chunk": 256}, {"kernel": "prewait", "k_chunk": 256},
  {"kernel": "prewait", "k_chunk": 256, "prewait": false, "trigger_dependents": false},
  {"kernel": "prewait", "k_chunk": 256}]'
else
  tests="tests/test_moe_prewait_down.py tests/test_dependent_launch.py"; test_s=150; budget=370
  configs='[{"kernel": "default", "k_chunk": 256},
  {"kernel": "prewait", "k_chunk": 256},
  {"kernel": "prewait", "k_chunk": 256, "prewait": false, "trigger_dependents": false},
  {"kernel": "prewait", "k_chunk": 256, "warpgroups": 2},
  {"kernel": "gemv", "k_chunk": 256, "trigger_dependents": true},
  {"kernel": "prewait", "k_chunk": 256},
  {"kernel": "mosaic", "wgmma_order": true}]'
fi
timeout $test_s python3 -m pytest -q -p no:cacheprovider -rs $tests > $OUT/tests.log 2>&1
echo "tests rc $?"; tail -6 $OUT/tests.log
mkdir -p $OUT/moe
timeout $((budget + 15)) env PYTHONPATH=. OUT=$OUT/moe python3 benchmarks/kernels.py --only moe --no-baselines \
  --device-span 12 --moe-rows 1 --budget $budget --moe-configs "$configs" > $OUT/moe.log 2>&1
echo "moe rc $?"; grep -E "copy|  moe M=" $OUT/moe.log | cut -c1-400
rm -f $OUT/moe/kernels_table.md
