# Issue 6, round 24 (session 29), call 1: XLA's programmatic dependent launch (PDL, Hopper: a kernel is launched
# while its predecessor drains and waits for it with griddepcontrol.wait) on the few-token MoE and the K2.6 slice.
# Three XLA_FLAGS settings, each in its own process, alternated: jax 0.11.2's default, PDL off, PDL on. For each:
#   the PTX of a jitted MoE dispatch at one token (does XLA put griddepcontrol into the Pallas kernels?);
#   benchmarks/slice_timeline.py (2-layer slice at 4K, T = 1 and 9: blocking, pipelined, traced device span);
#   benchmarks/kernels.py, the MoE dispatch at 1 and 4 tokens (checked against the reference, err column).
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
cat > /tmp/ptx_probe.py <<'PY'
import functools, sys
import jax, jax.numpy as jnp
sys.path.insert(0, "benchmarks")
import kernels as kb
from custom_calls.moe_int4 import KERNEL_K_CHUNK, experts_to_k_chunks, routed_experts_int4
args = kb.moe_inputs(1, 1, 2, 7168, 2048)
chunked = experts_to_k_chunks(args[3:], KERNEL_K_CHUNK)
fn = jax.jit(functools.partial(routed_experts_int4, expert_offset=0, impl="auto"))
print(float(jnp.abs(fn(*args[:3], *chunked).astype(jnp.float32)).sum()))
PY
for setting in default off on; do
  case $setting in
    default) flags="" ;;
    off) flags="--xla_gpu_enable_pdl=false --xla_gpu_enable_pdl_launch=false" ;;
    on) flags="--xla_gpu_enable_pdl=true --xla_gpu_enable_pdl_launch=true" ;;
  esac
  echo "== $setting: XLA_FLAGS=$flags"
  rm -rf /tmp/dump_$setting
  XLA_FLAGS="$flags --xla_dump_to=/tmp/dump_$setting" timeout 60 env PYTHONPATH=. python3 /tmp/ptx_probe.py \
    > $OUT/ptx_$setting.log 2>&1; tail -1 $OUT/ptx_$setting.log
  for f in /tmp/dump_$setting/*.ptx; do
    echo "$(basename $f): entries $(grep -c '^.visible .entry' $f), griddepcontrol.wait $(grep -c 'griddepcontrol.wait' $f), launch_dependents $(grep -c 'griddepcontrol.launch_dependents' $f)"
  done > $OUT/ptx_$setting.txt 2>&1; cat $OUT/ptx_$setting.txt | cut -c1-200
  awk '/^.visible .entry/{e=$3} /griddepcontrol/{print "  " e " " $1}' /tmp/dump_$setting/*.ptx | sort | uniq -c | head -20
  XLA_FLAGS="$flags" timeout 110 env PYTHONPATH=. python3 benchmarks/slice_timeline.py --slice "4096,1;4096,9" \
    --reps 30 --trace_dir /tmp/trace_$setting --out $OUT/timeline_$setting.json > $OUT/slice_$setting.log 2>&1
  grep -E "blocking|Error" $OUT/slice_$setting.log | cut -c1-250
  mkdir -p $OUT/moe_$setting
  XLA_FLAGS="$flags" timeout 90 env PYTHONPATH=. OUT=$OUT/moe_$setting python3 benchmarks/kernels.py --only moe \
    --moe-rows 1,4 --no-baselines --budget 75 > $OUT/moe_$setting.log 2>&1
  grep -E "^\[.*  moe M=" $OUT/moe_$setting.log | cut -c1-200
done
