# Issue 6 thirteenth round, GPU call 7: rounds_per_call under XLA command buffers for every thunk kind (WHILE and
# CONDITIONAL included, graphs from one kernel on), against call 6's default: can the loop of rounds run on the
# device as one graph? engine_rounds.py, AR and DDTree N=32, K = 1 and 8; host events of DDTree N=32, K = 8.
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
ALL="--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,WHILE,CONDITIONAL --xla_gpu_graph_min_graph_size=1"
XLA_FLAGS="$ALL" timeout 300 env PYTHONPATH=. python3 benchmarks/engine_rounds.py --num_prompts 8 --max_new_tokens 128 \
  --reps 2 --runs "ar:1,ddtree:32" --rounds_per_call 1,8 --trace_dir /tmp/tr --out $OUT/engine_rounds_all.json \
  > $OUT/engine_rounds_all.log 2>&1
grep -E "N=|Error|error" $OUT/engine_rounds_all.log | cut -c1-250
python3 benchmarks/xplane_timeline.py /tmp/tr/ddtree_32_k8.xplane.pb --plane /host:CPU --top 40 > $OUT/ddtree_32_k8_all.host.txt 2>&1
ls $OUT
