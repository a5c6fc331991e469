# Issue 6, prepared in session 16 for the next GPU session (NOT RUN: the device time ran out). The round-level
# effect of the drafter's two-stage top-K (ddtree_jax/topk.py; r14 call 8 timed it alone: [1, 15, 4096] K 8 / 32
# 27 / 38 -> 16 / 23 us), as an A/B in one process on the embedded model (engine_rounds.py --topk_stages auto,one:
# the engine's programs are recompiled for each setting; the tokens must agree), and the AR baseline.
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
timeout 400 env PYTHONPATH=. python3 benchmarks/engine_rounds.py --num_prompts 8 --max_new_tokens 128 --reps 3 \
  --runs "ddtree:8,ddtree:32,ar:1" --rounds_per_call 8 --topk_stages auto,one --out $OUT/engine_rounds_topk.json \
  > $OUT/engine_rounds_topk.log 2>&1
grep -E "N=|Error|error" $OUT/engine_rounds_topk.log | cut -c1-250
