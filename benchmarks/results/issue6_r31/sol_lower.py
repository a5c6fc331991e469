# Round 31: lowers speed_of_light.moe_read (read_1, read_1_spin, read_2) at 1 token for an abstract H200 and writes
# the Triton IR to /tmp/sol_sass (.venv/bin/python benchmarks/results/issue6_r31/sol_lower.py); then: /tmp/tv/bin/python benchmarks/sass_report.py compile --dir /tmp/sol_sass
# --num_warps 4 --num_stages 1 (registers and shared memory per program: sol_sass.txt).
import functools, os, sys
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, ROOT); sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
os.makedirs("/tmp/sol_sass", exist_ok=True)
import jax, jax.numpy as jnp
from custom_calls.gpu_lowering import lower_for_abstract_gpu
import speed_of_light as sol
S = jax.ShapeDtypeStruct
e, d, inter, n = 48, 7168, 2048, 1
cfg = sol.moe_shape(False)[4][0]
print(cfg)
experts = []
for rows, cols in ((inter, d), (inter, d), (d, inter)):
  experts += [S((e, rows, cols // 8), jnp.int32), S((e, rows, cols // 32), jnp.bfloat16)]
for variant in ("read_1", "read_1_spin", "read_2"):
  written = []
  def dump(module, variant=variant):
    path = f"/tmp/sol_sass/{variant}_{len(written) + 1}.ttir"
    open(path, "w").write(module.operation.get_asm(enable_debug_info=False)); written.append(path)
  fn = functools.partial(sol.moe_read, variant=variant, cfg=cfg)
  lower_for_abstract_gpu(fn, S((n, d), jnp.bfloat16), S((n, 8), jnp.int32), *experts, on_module=dump)
  print(variant, written)
