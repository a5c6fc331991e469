"""Collectives of one compiled round of Kimi K2.6 on 8 devices, from the HLO (abstract shapes, no weights).

  python benchmarks/collectives.py                    # 8 virtual CPU devices, mesh 1x8, ar + ddtree (budget 32)
  python benchmarks/collectives.py --mesh=2x4 --batch=2 --modes=ddtree

The round is lowered with ShapeDtypeStructs carrying the shardings of ddtree_jax/sharding.py and
compiled (SPMD partitioning happens at compile time); the collectives are counted in the compiled HLO,
with the bytes of their results. Ops inside while loops are counted once (static count).

Expected count at T = 0, batch 1, mesh 1xM (derivation; L = 61 target layers, Ld = 6 drafter layers):
  target forward  = 1 (embedding lookup from vocabulary shards: masked gather + all-reduce [B,T,D])
                  + L (attention: o_proj rows split by head -> all-reduce [B,T,D])
                  + 1 (layer 0 dense MLP: down_proj rows split -> all-reduce [B,T,D])
                  + (L-1) (MoE: one psum of routed experts + shared expert partials [B*T,D] fp32)
                  = 2L + 1 = 123
  greedy decision = 2 (vocab-parallel argmax: pmax of the row max, pmin of the index) -> [B,T] each
  ar round        = 123 + 2 = 125
  drafter         = 1 (embedding of the block) + 2*Ld (o_proj and MLP down_proj all-reduces) = 13
  top-K log-probs = 2 all-reduces (pmax, psum of the normaliser) + 2 all-gathers (K values, K ids per shard)
  ddtree round    = 13 + 4 + 123 + 2 = 142
A "data" axis adds none: each data group runs its own requests (the batch split over "data", the
MoE router and top-K per data group, sharding.per_data_group), so on DxM every data group runs the ops
of 1xM among its own M devices (replica groups over "model" only): the same count; on Dx1 nothing is split
over "model" and a round has no collectives at all (expected 0). "over data" counts the ops whose
replica groups span the data axis: 0 expected.
Bytes (bf16 activations, fp32 MoE psum): attention / dense all-reduce 2*T*7168 B, MoE psum 4*T*7168 B.
"""
from __future__ import annotations

import os
import re
import sys
import time

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
  os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags  # noqa: E402

from ddtree_jax.cli import distributed  # noqa: E402,F401  (--mesh, default 1 x all devices)

FLAGS = flags.FLAGS
flags.DEFINE_integer("batch", 1, "batch")
flags.DEFINE_integer("context", 4096, "cache capacity (collectives do not depend on it)")
flags.DEFINE_integer("budget", 32, "DDTree budget")
flags.DEFINE_list("modes", ["ar", "ddtree"], "modes to compile")
flags.DEFINE_integer("layers", 0, "override num_hidden_layers (0 = K2.6's 61)")
flags.DEFINE_string("hlo_dir", None, "write the compiled HLO text here")

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
_DT = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "bf16": 2, "f16": 2, "s32": 4, "u32": 4, "f32": 4,
       "s64": 8, "u64": 8, "f64": 8}


def _shape_bytes(text: str) -> int:
  total = 0
  for dt, dims in re.findall(r"\b(pred|[suf]\d+|bf16)\[([\d,]*)\]", text):
    n = 1
    for d in dims.split(","):
      if d:
        n *= int(d)
    total += n * _DT.get(dt, 4)
  return total


def _collective_lines(hlo: str):
  """(op, result shape, instruction line) per collective of the compiled HLO (async *-start counted once)."""
  for line in hlo.splitlines():
    m = re.match(r"\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(.+?)\s+([a-z\-]+)\(", line)
    if not m:
      continue
    shape, op = m.group(1), m.group(2)
    base = op[:-len("-start")] if op.endswith("-start") else op
    if base in COLLECTIVES and not op.endswith("-done"):
      yield base, shape, line


def count_collectives(hlo: str) -> dict:
  """{op: (count, bytes, [shapes])} over the instructions of the compiled HLO (async *-start counted once)."""
  out = {}
  for base, shape, _ in _collective_lines(hlo):
    c, b, shapes = out.get(base, (0, 0, []))
    out[base] = (c + 1, b + _shape_bytes(shape), shapes + [shape])
  return out


def count_over_data(hlo: str, model: int) -> int:
  """Collectives whose replica groups span the "data" axis: mesh-style groups (`mesh[...] {'data'}`), or
  explicit device-id groups holding ids of different data rows (id // model differs; model-fastest layout)."""
  n = 0
  for _, _, line in _collective_lines(hlo):
    m = re.search(r"replica_groups=mesh\[[^\]]*\]\s*\{([^}]*)\}", line)
    if m:
      n += "'data'" in m.group(1)
      continue
    m = re.search(r"replica_groups=(\{\{[\d,{}]*\}\})", line)
    if m:
      groups = [[int(i) for i in g.split(",") if i] for g in re.findall(r"\{([\d,]+)\}", m.group(1))]
      n += any(len({i // model for i in g}) > 1 for g in groups)
  return n


def expected(cfg, dcfg, mode: str, model: int = 8) -> int:
  """The collectives of one round on a DATAxMODEL mesh (the docstring's derivation; `model` = MODEL)."""
  if model == 1:
    return 0
  n_layers = cfg.num_hidden_layers
  target = 2 * n_layers + 1
  if mode == "ar":
    return target + 2
  return (1 + 2 * dcfg.num_hidden_layers) + 4 + target + 2


def lower_round(cfg, dcfg, mode: str, mesh, batch: int, context: int, budget: int):
  import types
  import jax
  import jax.numpy as jnp
  from flax import nnx
  from ddtree_jax import sharding
  from ddtree_jax.engine import Engine, _jit
  from ddtree_jax.model.deepseek import DeepseekV3
  from ddtree_jax.model.dflash import DFlashDrafter
  from ddtree_jax.sampling import SamplingParams

  bf16 = jnp.bfloat16
  ns = types.SimpleNamespace(target_cfg=cfg, drafter_cfg=dcfg if mode != "ar" else None, mesh=mesh, cache_dtype=bf16)
  spec = Engine.round_spec(ns, mode, budget, SamplingParams())

  def abstract(module, rule):
    graph, state = nnx.split(module)
    shard = sharding.module_state_shardings(state, rule)
    return graph, jax.tree_util.tree_map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), state, shard)

  target = nnx.eval_shape(lambda: DeepseekV3(cfg, dtype=bf16, rngs=nnx.Rngs(0)))
  sharding.with_mesh(target, mesh)
  tg, tp = abstract(target, sharding.target_rule(mesh, cfg))
  dg = dp = None
  if mode != "ar":
    drafter = nnx.eval_shape(lambda: DFlashDrafter(dcfg, dtype=bf16, rngs=nnx.Rngs(0)))
    dg, dp = abstract(drafter, sharding.drafter_rule(mesh, dcfg))
  import inspect
  n_init = len(inspect.signature(Engine._init_state).parameters) - 1
  args = (batch, context, 64 + max(spec.block_size, 1), 65, 0) + ((8,) if n_init > 5 else ())
  state = jax.eval_shape(lambda: Engine._init_state(ns, *args))
  st_sh = sharding.state_shardings(state, mesh, ns.drafter_cfg)
  state = jax.tree_util.tree_map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), state, st_sh)
  return _jit("round", spec, tg, dg, st_sh).lower(tp, dp, state)


def main(argv):
  del argv
  import jax
  from configs.kimi_k2_6 import kimi_k2_6
  from ddtree_jax import sharding
  from ddtree_jax.plan import k26_drafter
  cfg = kimi_k2_6()
  if FLAGS.layers:
    cfg = cfg.replace(num_hidden_layers=FLAGS.layers)
  dcfg = k26_drafter(cfg)
  if FLAGS.layers:
    dcfg = dcfg.replace(target_layer_ids=tuple(min(i, FLAGS.layers - 1) for i in dcfg.target_layer_ids),
                        num_target_layers=FLAGS.layers)
  mesh = sharding.make_mesh(FLAGS.mesh)
  mesh_name = f"{mesh.shape['data']}x{mesh.shape['model']}"
  print(f"K2.6 ({cfg.num_hidden_layers} layers) + DFlash drafter ({dcfg.num_hidden_layers} layers), mesh {mesh_name}, "
        f"{jax.device_count()} {jax.devices()[0].platform} devices, batch {FLAGS.batch}, T=0")
  for mode in FLAGS.modes:
    t0 = time.time()
    lowered = lower_round(cfg, dcfg, mode, mesh, FLAGS.batch, FLAGS.context, FLAGS.budget)
    hlo = lowered.compile().as_text()
    if FLAGS.hlo_dir:
      os.makedirs(FLAGS.hlo_dir, exist_ok=True)
      with open(os.path.join(FLAGS.hlo_dir, f"round_{mode}.hlo.txt"), "w") as f:
        f.write(hlo)
    counts = count_collectives(hlo)
    total = sum(c for c, _, _ in counts.values())
    nbytes = sum(b for _, b, _ in counts.values())
    label = mode + (f" (budget {FLAGS.budget}, T={FLAGS.budget + 1})" if mode == "ddtree" else " (T=1)")
    print(f"\n{label}: compiled in {time.time() - t0:.0f} s")
    model = mesh.shape["model"]
    print(f"  collectives per round: {total} (expected {expected(cfg, dcfg, mode, model)}), "
          f"{count_over_data(hlo, model)} over data (expected 0), {nbytes:,} bytes of results")
    for op, (c, b, shapes) in sorted(counts.items()):
      hist: dict = {}
      for s in shapes:
        hist[s] = hist.get(s, 0) + 1
      top = ", ".join(f"{n} x {s}" for s, n in sorted(hist.items(), key=lambda kv: -kv[1])[:6])
      print(f"  {op:18s} {c:4d}  {b:>12,} B   {top}")


if __name__ == "__main__":
  app.run(main)
