# Issue 6 thirteenth round, GPU call 2: the slice forward's launch gaps. benchmarks/slice_timeline.py (blocking and
# pipelined medians, and a jax.profiler trace read by xplane_timeline.py: per call span, busy, idle) on the
# 1 dense + 1 MoE layer slice at 4K, T = 1 and 9, under three XLA_FLAGS settings:
#   default   jax 0.11.2's command buffers;
#   off       --xla_gpu_enable_command_buffer= (every kernel launched on its own);
#   all       command buffers for every kind of thunk, from a single kernel on.
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
ALL="--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,WHILE,CONDITIONAL --xla_gpu_graph_min_graph_size=1"
for setting in default off all; do
  case $setting in
    default) flags="" ;;
    off) flags="--xla_gpu_enable_command_buffer=" ;;
    all) flags="$ALL" ;;
  esac
  XLA_FLAGS="$flags" timeout 150 env PYTHONPATH=. python3 benchmarks/slice_timeline.py --slice "4096,1;4096,9" \
    --reps 30 --trace_dir /tmp/trace_$setting --out $OUT/timeline_$setting.json > $OUT/$setting.log 2>&1
  echo "== $setting"; grep -E "blocking|Error" $OUT/$setting.log | cut -c1-250
done
