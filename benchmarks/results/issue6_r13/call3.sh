# Issue 6 thirteenth round, GPU call 3: (1) Engine.run_ahead on the embedded default model (bf16): tokens/s and
# wall time per round with each round read back before the next is enqueued, against the next round enqueued
# first (benchmarks/run_ahead.py; the tokens must be identical); (2) the 4-layer slice (1 dense + 3 MoE) under
# slice_timeline.py, blocking / pipelined / device span, with its jax.profiler traces kept (host events).
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
timeout 240 env PYTHONPATH=. python3 benchmarks/run_ahead.py --num_prompts 8 --max_new_tokens 128 --reps 3 \
  --runs "ar:1,ddtree:8,ddtree:32" --out $OUT/run_ahead.json > $OUT/run_ahead.log 2>&1
grep -E "N=|Error|error" $OUT/run_ahead.log | cut -c1-250
timeout 150 env PYTHONPATH=. python3 benchmarks/slice_timeline.py --slice "4096,1;4096,9;32768,1" --moe_layers 3 \
  --reps 30 --trace_calls 4 --trace_dir $OUT/trace --out $OUT/timeline_4layers.json > $OUT/timeline.log 2>&1
grep -E "blocking|Error" $OUT/timeline.log | cut -c1-250
find $OUT/trace -name "*.xplane.pb" | head; du -sh $OUT/trace
