# Issue 6 fourteenth round, GPU call 6: call 5's engine_rounds with XLA command buffers for every thunk kind (WHILE
# and CONDITIONAL included, graphs from one kernel), as r13 call 7 did before init_state was compiled: with the
# ~22 ms of eager set-up gone from every generate, does the device-side loop of rounds now pay?
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
ALL="--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,WHILE,CONDITIONAL --xla_gpu_graph_min_graph_size=1"
XLA_FLAGS="$ALL" timeout 300 env PYTHONPATH=. python3 benchmarks/engine_rounds.py --num_prompts 8 --max_new_tokens 128 \
  --reps 2 --runs "ar:1,ddtree:8,ddtree:32" --rounds_per_call 1,8 --trace_dir /tmp/tr --out $OUT/engine_rounds_all.json \
  > $OUT/engine_rounds_all.log 2>&1
grep -E "N=|Error|error" $OUT/engine_rounds_all.log | cut -c1-250
python3 benchmarks/xplane_timeline.py /tmp/tr/ddtree_32_k8.xplane.pb --plane /host:CPU --top 30 > $OUT/ddtree_32_k8_all.host.txt 2>&1
head -16 $OUT/ddtree_32_k8_all.host.txt
XLA_FLAGS="$ALL" timeout 60 env PYTHONPATH=. python3 -m ddtree_jax.cli.generate --mode=ddtree --budget=32 --max_new_tokens=64 \
  --prompt="def fibonacci(n):" > $OUT/demo_all.log 2>&1
tail -1 $OUT/demo_all.log
