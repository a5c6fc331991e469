# Issue 6 ninth round, GPU call 6 (session 11): the kernels (fusions, custom calls) of one 64-head and one 8-head
# decode program after XLA's optimisations, to see what besides the attention kernel runs (call 5: ~20 us).
set -x
mkdir -p $OUT/hlo
cat > /tmp/dump.py <<'PY'
import sys; sys.path.insert(0, "benchmarks")
import functools, jax
import kernels as kb
from custom_calls.mla_attention import mla_attention
for (b, t, h, s) in [(1, 1, 64, 32768), (1, 1, 8, 32768)]:
  args = kb.mla_inputs(1, b, t, h, s)
  jax.jit(functools.partial(mla_attention, scale=kb.SCALE)).lower(*args).compile()
PY
XLA_FLAGS="--xla_dump_to=$OUT/hlo --xla_dump_hlo_as_text" timeout 200 env PYTHONPATH=. \
  python3 /tmp/dump.py > $OUT/dump.log 2>&1
ls $OUT/hlo | head -30
for f in $(grep -l "custom_call_target" $OUT/hlo/*after_optimizations.txt); do echo "== $f"; grep -E "^ENTRY" -A60 $f | grep -E " fusion\(| custom-call\(| copy\(|ROOT|constant|broadcast" | cut -c1-200; done
