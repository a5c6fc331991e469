# Issue 6 round 45, call 2 (timeout 600): call 1 with less budget left (about 420 s of device time): the prewait
# tests, then the 1-token A/B/A without the two extra configs (prewait without the trigger; the gemv with it).
nvidia-smi --query-gpu=name --format=csv | tee $OUT/gpu.txt
timeout 150 python3 -m pytest -q -p no:cacheprovider -rs tests/test_moe_prewait_down.py > $OUT/tests.log 2>&1
echo "tests rc $?"; tail -6 $OUT/tests.log
mkdir -p $OUT/moe
timeout 235 env PYTHONPATH=. OUT=$OUT/moe python3 benchmarks/kernels.py --only moe --no-baselines --device-span 12 \
  --moe-rows 1 --budget 220 --moe-configs '[{"kernel": "default", "k_chunk": 256},
  {"kernel": "prewait", "k_chunk": 256},
  {"kernel": "prewait", "k_chunk": 256, "prewait": false, "trigger_dependents": false},
  {"kernel": "prewait", "k_chunk": 256}]' > $OUT/moe.log 2>&1
echo "moe rc $?"; grep -E "copy|  moe M=" $OUT/moe.log | cut -c1-400
rm -f $OUT/moe/kernels_table.md
