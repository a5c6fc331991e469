# Issue 6 fourteenth round, GPU call 5: the engine with init_state compiled (one program per shape instead of ~30
# eager dispatches, which r13 call 7's host trace put at ~22 ms of every generate). engine_rounds.py as in r13
# call 6 (8 prompts x 128 tokens, batch 1, bf16; tok/s on generate's wall time, now also the engine's own clock),
# one traced DDTree N=32 K=8 generation (host events); then the GPU end-to-end tests and the demo command.
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
timeout 330 env PYTHONPATH=. python3 benchmarks/engine_rounds.py --num_prompts 8 --max_new_tokens 128 --reps 2 \
  --runs "ar:1,ddtree:8,ddtree:32" --rounds_per_call 1,8 --trace_dir /tmp/tr --out $OUT/engine_rounds.json \
  > $OUT/engine_rounds.log 2>&1
grep -E "N=|Error|error" $OUT/engine_rounds.log | cut -c1-250
python3 benchmarks/xplane_timeline.py /tmp/tr/ddtree_32_k8.xplane.pb --plane /host:CPU --top 30 > $OUT/ddtree_32_k8.host.txt 2>&1
head -14 $OUT/ddtree_32_k8.host.txt
timeout 150 env PYTHONPATH=. python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kernels_e2e.py > $OUT/pytest.log 2>&1
tail -2 $OUT/pytest.log
timeout 90 env PYTHONPATH=. python3 -m ddtree_jax.cli.generate --mode=ddtree --budget=32 --max_new_tokens=64 \
  --prompt="def fibonacci(n):" > $OUT/demo.log 2>&1
tail -4 $OUT/demo.log
