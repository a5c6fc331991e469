# Issue 6 eleventh round, GPU call 3: do XLA's command buffers (CUDA graphs) shrink the launch gaps of the short
# decode and the few-token MoE? The same two benchmarks under three XLA_FLAGS settings, one run each:
#   default   jax 0.11.2's own command-buffer settings;
#   off       --xla_gpu_enable_command_buffer= (every kernel launched on its own);
#   graphs    command buffers for fusions, cuBLAS, custom calls (the Pallas kernels) and loops, from 1 kernel.
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
GRAPHS="--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,WHILE,CONDITIONAL --xla_gpu_graph_min_graph_size=1"
for setting in default off graphs; do
  case $setting in
    default) flags="" ;;
    off) flags="--xla_gpu_enable_command_buffer=" ;;
    graphs) flags="$GRAPHS" ;;
  esac
  mkdir -p $OUT/$setting
  OUT=$OUT/$setting XLA_FLAGS="$flags" timeout 170 env PYTHONPATH=. python3 benchmarks/kernels.py --only all \
    --mla-shapes "1,1,64,8192;1,1,64,32768;1,1,8,32768" --mla-no-sweep --moe-rows 1,2,8,64 --no-baselines \
    --moe-configs '[{"kernel": "default", "k_chunk": 256}]' --budget 150 > $OUT/$setting/kernels.log 2>&1
  echo "== $setting"; grep -E "^\|" $OUT/$setting/kernels.log | tail -9
done
