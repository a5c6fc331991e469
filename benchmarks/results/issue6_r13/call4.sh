# Issue 6 thirteenth round, GPU call 4: jax.profiler traces (host and device planes) of the embedded model's
# generation (AR and DDTree N=32, run_ahead off and on) and of the 2-layer slice forwards, each copied flat to
# $OUT as *.xplane.pb for benchmarks/xplane_timeline.py (what the host does per round, where the device idles).
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
timeout 200 env PYTHONPATH=. python3 benchmarks/run_ahead.py --num_prompts 2 --max_new_tokens 64 --reps 1 \
  --runs "ar:1,ddtree:32" --trace_dir /tmp/tr --out $OUT/run_ahead.json > $OUT/run_ahead.log 2>&1
grep -E "N=|Error|error" $OUT/run_ahead.log | cut -c1-250
cp /tmp/tr/*.xplane.pb $OUT/
timeout 120 env PYTHONPATH=. python3 benchmarks/slice_timeline.py --slice "4096,1" --moe_layers 1 \
  --reps 20 --trace_calls 4 --trace_dir /tmp/str --out $OUT/timeline.json > $OUT/timeline.log 2>&1
grep -E "blocking|Error" $OUT/timeline.log | cut -c1-250
cp /tmp/str/*.xplane.pb $OUT/
for f in $OUT/*.xplane.pb; do python3 benchmarks/xplane_timeline.py $f --plane /host:CPU --top 30 > $f.host.txt 2>&1; done
ls -la $OUT
