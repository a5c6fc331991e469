# Round 32, call 3: why read_1_flags gave NaN on the GPU (call 2) where the interpreter passed. Runs moe_read's
# read_1_flags kernel once at 1 token and prints its sync array after the launch: the arrivals' counter (word 1,
# expected 512) and the 64 flags (expected >= 1 each), and how many outputs are NaN (down programs that gave up).
import os, sys
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, ROOT); sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import numpy as np
from jax.experimental import pallas as pl_module
import kernels as kb
import speed_of_light as sol

captured = []


class CapturingPallas:
  """sol.pl with pallas_call's outputs kept (moe_read returns only `out`)."""
  def __getattr__(self, name):
    return getattr(pl_module, name)

  def pallas_call(self, *args, **kwargs):
    fn = pl_module.pallas_call(*args, **kwargs)
    def run(*a):
      r = fn(*a)
      captured.append(r)
      return r
    return run


sol.pl = CapturingPallas()
cfg = sol.moe_shape(False)[4][0]
x, ids, _w, *experts = kb.moe_inputs(1, 1, 48, 7168, 2048)
for variant in ("read_1_spin", "read_1_flags", "read_1_flags_volatile"):
  captured.clear()
  out = np.asarray(sol.moe_read(x, ids, *experts, variant=variant, cfg=cfg))
  h, out2, sync = (np.asarray(a) for a in captured[-1])
  flags = sync[sol.FLAG_BASE::32][:sol.NUM_FLAGS] if sync.shape[0] > 2 else []
  print(variant, "counter", sync[1], "flags min/max", (min(flags), max(flags)) if len(flags) else None,
        "nan outputs", int(np.isnan(out).sum()), "of", out.size, flush=True)
