# Issue 6 thirteenth round, GPU call 6: Engine.run(rounds_per_call=K) on the embedded default model (bf16, batch 1,
# 8 prompts x 128 tokens): K rounds per compiled call (a device loop), so the host's per-call cost (argument
# handling, command-buffer update and graph launch: ~1.5-3 ms a call, call 4's traces) is shared by K rounds.
# benchmarks/engine_rounds.py checks that every K gives the same tokens. Host events of DDTree N=32 at K=1 and 8.
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
timeout 420 env PYTHONPATH=. python3 benchmarks/engine_rounds.py --num_prompts 8 --max_new_tokens 128 --reps 2 \
  --runs "ar:1,ddtree:8,ddtree:32" --rounds_per_call 1,4,8 --trace_dir /tmp/tr --out $OUT/engine_rounds.json \
  > $OUT/engine_rounds.log 2>&1
grep -E "N=|Error|error" $OUT/engine_rounds.log | cut -c1-250
for k in 1 8; do python3 benchmarks/xplane_timeline.py /tmp/tr/ddtree_32_k$k.xplane.pb --plane /host:CPU --top 40 \
  > $OUT/ddtree_32_k$k.host.txt 2>&1; python3 benchmarks/xplane_timeline.py /tmp/tr/ddtree_32_k$k.xplane.pb \
  --gap_us 100000 --top 30 > $OUT/ddtree_32_k$k.device.txt 2>&1; done
ls $OUT
