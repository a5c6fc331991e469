"""The device mesh and the partition rules, in one place (DESIGN.md "Sharding").

Mesh axes: ("data", "model"). "data" splits the batch (requests); "model" splits the model:
- attention heads: q_b_proj / kv_b_proj columns by head, o_proj rows by head (8 of 64 heads per GPU on K2.6);
- the target's latent cache is replicated over "model" (MLA: one 576-dim latent shared by all heads),
  split by batch over "data" when the batch divides;
- routed experts split on their expert axis (expert parallel inside `shard_map`, see model/moe.py: every
  device runs its own experts on the replicated tokens with expert_offset = axis_index * E_local, and one
  all-reduce combines them together with the shared expert's partial sum);
- the dense MLP and the shared expert split on the intermediate dimension;
- the embedding and the lm_head split on the vocabulary (decisions from vocab shards: vocab_parallel.py);
- the drafter: attention heads (q by head, k/v by KV head, o rows), MLP intermediate; its KV cache by KV head;
- a block's tokens [B*T, ...] split over "data" like the batch (`token_axis`); ops that XLA's partitioner
  does not split by rows (lax.top_k: the MoE router, the drafter's top-K) run per data group (`per_data_group`);
- training (the trainers, data parallel): the batch over "data", parameters and Adam's moments by these
  rules (`train_state_shardings`).
A tensor whose split dimension does not divide (on head / expert / vocabulary boundaries) is replicated.

Rules are regexes over parameter paths ("layers.3.self_attn.q_b_proj.kernel"), maxtext-style: the first
match wins. `param_rule(mesh, cfg)` turns them into the `Shardings` rule that `checkpoint.load` and orbax
restore take, so parameters are read straight into their shards.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Optional, Sequence

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

DATA = "data"
MODEL = "model"
AXES = (DATA, MODEL)

# (regex, spec template, divisibility requirement): the template names mesh axes per tensor dimension;
# the requirement (a config field or None) must divide by the "model" axis size, else replicate.
TARGET_RULES: tuple[tuple[str, tuple, Optional[str]], ...] = (
    (r"^embed_tokens\.embedding$", (MODEL, None), "vocab_size"),                  # [V, D]
    (r"^lm_head\.kernel$", (None, MODEL), "vocab_size"),                          # [D, V]
    (r"self_attn\.(q_b_proj|q_proj)\.kernel$", (None, MODEL), "num_attention_heads"),   # [Q, H*192]
    (r"self_attn\.kv_b_proj\.kernel$", (None, MODEL), "num_attention_heads"),     # [R, H*(128+128)]
    (r"self_attn\.o_proj\.kernel$", (MODEL, None), "num_attention_heads"),        # [H*128, D]
    (r"mlp\.experts\.", (MODEL, None, None), "n_routed_experts"),                 # [E, ., .]
    (r"mlp\.experts\.", (MODEL, None, None, None), "n_routed_experts"),           # k-chunked INT4 [E, ., ., .]
    (r"mlp\.shared_experts\.(gate|up)_proj\.kernel$", (None, MODEL), "shared_intermediate"),   # [D, I]
    (r"mlp\.shared_experts\.down_proj\.kernel$", (MODEL, None), "shared_intermediate"),        # [I, D]
    (r"mlp\.(gate|up)_proj\.kernel$", (None, MODEL), "intermediate_size"),        # dense layers [D, I]
    (r"mlp\.down_proj\.kernel$", (MODEL, None), "intermediate_size"),             # [I, D]
    (r".*", (), None),        # norms, q_a_proj, kv_a_proj_with_mqa, router, correction bias: replicated
)

DRAFTER_RULES: tuple[tuple[str, tuple, Optional[str]], ...] = (
    (r"self_attn\.q_proj\.kernel$", (None, MODEL), "num_attention_heads"),        # [D, H*hd]
    (r"self_attn\.(k|v)_proj\.kernel$", (None, MODEL), "num_key_value_heads"),    # [D, KVH*hd]
    (r"self_attn\.o_proj\.kernel$", (MODEL, None), "num_attention_heads"),        # [H*hd, D]
    (r"mlp\.(gate|up)_proj\.kernel$", (None, MODEL), "intermediate_size"),
    (r"mlp\.down_proj\.kernel$", (MODEL, None), "intermediate_size"),
    (r".*", (), None),        # fc, norms (q_norm/k_norm per head dim): replicated
)


# ---- the mesh ----------------------------------------------------------------------------------

def parse_mesh(text: Optional[str], n_devices: Optional[int] = None) -> tuple[int, int]:
  """"2x4" -> (data 2, model 4). None or "" -> (1, all devices). Raises ValueError on a bad string."""
  n = jax.device_count() if n_devices is None else n_devices
  if not text:
    return 1, n
  m = re.fullmatch(r"\s*(\d+)\s*[xX*]\s*(\d+)\s*", text)
  if not m:
    hint = (" (name=size meshes such as 'expert=8', ddtree-convert's old syntax, are not accepted: "
            "experts split over MODEL, so 'expert=8' is 1x8)") if "=" in text else ""
    raise ValueError(f"--mesh={text!r}: expected DATAxMODEL, e.g. 1x8, 2x4 or 8x1{hint}")
  d, mo = int(m.group(1)), int(m.group(2))
  if d < 1 or mo < 1:
    raise ValueError(f"--mesh={text!r}: axis sizes must be >= 1")
  if d * mo != n:
    raise ValueError(f"--mesh={text!r} needs {d * mo} devices, but {n} are visible "
                     f"(use a DATAxMODEL product of {n}, e.g. 1x{n})")
  return d, mo


def make_mesh(shape: Optional[str | Sequence[int]] = None, devices: Optional[Sequence[Any]] = None) -> Mesh:
  """A ("data", "model") mesh over `devices` (default: all visible devices, all processes).

  shape: "DATAxMODEL" or (data, model); None = (1, all devices). Devices are laid out so that the
  "model" axis is the fastest-varying one (neighbouring devices, e.g. one host's GPUs, share a model group).
  """
  devs = list(jax.devices() if devices is None else devices)
  if shape is None or isinstance(shape, str):
    d, m = parse_mesh(shape, len(devs))
  else:
    d, m = (int(s) for s in shape)
    if d * m != len(devs):
      raise ValueError(f"mesh {d}x{m} needs {d * m} devices, got {len(devs)}")
  if devices is None:
    return jax.make_mesh((d, m), AXES, axis_types=(AxisType.Auto, AxisType.Auto))
  return Mesh(np.asarray(devs, dtype=object).reshape(d, m), AXES, axis_types=(AxisType.Auto, AxisType.Auto))


def model_size(mesh: Optional[Mesh]) -> int:
  return 1 if mesh is None else int(mesh.shape.get(MODEL, 1))


def data_size(mesh: Optional[Mesh]) -> int:
  return 1 if mesh is None else int(mesh.shape.get(DATA, 1))


def batch_axis(mesh: Optional[Mesh], batch: int) -> Optional[str]:
  """The mesh axis that splits a batch dimension of size `batch` ("data" when it divides), else None."""
  d = data_size(mesh)
  return DATA if d > 1 and batch % d == 0 else None


def splits(mesh: Optional[Mesh], n: int) -> bool:
  """True when `n` (heads, experts, vocabulary...) is split over "model" (> 1 device and divisible)."""
  m = model_size(mesh)
  return m > 1 and n % m == 0


# ---- parameter rules ---------------------------------------------------------------------------

def _requirement(cfg, name: Optional[str]) -> Optional[int]:
  if name is None or cfg is None:
    return None
  if name == "shared_intermediate":
    return cfg.moe_intermediate_size * cfg.n_shared_experts
  return getattr(cfg, name, None)


def spec_for(path: str, shape: Sequence[int], mesh: Mesh, cfg=None, rules=TARGET_RULES) -> P:
  """The PartitionSpec of parameter `path` with `shape` (first matching rule; replicated when the split
  dimension, or the config quantity named by the rule, does not divide by the "model" axis size)."""
  m = model_size(mesh)
  for pattern, template, need in rules:
    if not re.search(pattern, path):
      continue
    if not template or m == 1:
      return P()
    if len(template) != len(shape):
      continue                  # a rule of another rank (stored vs k-chunked experts); the last rule replicates
    req = _requirement(cfg, need)
    if req is not None and req % m:
      return P()
    for dim, axis in zip(shape, template):
      if axis is not None and dim % mesh.shape[axis]:
        return P()
    return P(*template)
  return P()


def param_rule(mesh: Mesh, cfg=None, rules=TARGET_RULES) -> Callable[[str, tuple, Any], NamedSharding]:
  """A `Shardings` rule (path, shape, dtype) -> NamedSharding for checkpoint.load / orbax restore."""
  def rule(path: str, shape: tuple, dtype=None) -> NamedSharding:
    del dtype
    return NamedSharding(mesh, spec_for(path, shape, mesh, cfg, rules))
  return rule


def target_rule(mesh: Mesh, cfg) -> Callable:
  return param_rule(mesh, cfg, TARGET_RULES)


def drafter_rule(mesh: Mesh, dcfg) -> Callable:
  return param_rule(mesh, dcfg, DRAFTER_RULES)


def _path_str(path) -> str:
  parts = []
  for k in path:
    key = getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))
    parts.append(str(key))
  return ".".join(parts)


def module_state_shardings(state, rule: Callable) -> Any:
  """Shardings for an nnx.State (params and constants) by the path rule; non-parameter constants
  (RoPE tables) replicated."""
  def one(path, leaf):
    s = _path_str(path)
    if s.endswith(".value"):
      s = s[: -len(".value")]
    return rule(s, tuple(getattr(leaf, "shape", ())), getattr(leaf, "dtype", None))
  return jax.tree_util.tree_map_with_path(one, state)


def put_global(x, sharding: NamedSharding):
  """Places a host-visible value with `sharding`; works when the mesh spans several processes (each
  process must hold the same full value, e.g. the same seed or the same checkpoint)."""
  if isinstance(x, jax.Array) and x.sharding == sharding:
    return x
  if sharding.is_fully_addressable:
    return jax.device_put(x, sharding)
  if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
    data = np.asarray(jax.random.key_data(x))
    impl = jax.random.key_impl(x)
    arr = jax.make_array_from_callback(data.shape, NamedSharding(sharding.mesh, P()), lambda idx: data[idx])
    return jax.random.wrap_key_data(arr, impl=impl)
  host = np.asarray(x)
  return jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx])


def shard_module_state(state, rule: Callable):
  """Moves an nnx.State onto the mesh by the rule (no-op for leaves already placed so)."""
  shardings = module_state_shardings(state, rule)
  return jax.tree_util.tree_map(put_global, state, shardings)


# ---- the model's mesh --------------------------------------------------------------------------

def with_mesh(model, mesh: Optional[Mesh]):
  """Tells the model's mesh-aware modules (the target, its MoE blocks) which mesh the program runs on:
  a static attribute, part of the graphdef (no global state). Returns the model."""
  from flax import nnx
  for _, m in nnx.iter_graph(model):
    if isinstance(m, nnx.Module) and hasattr(m, "mesh"):
      m.mesh = mesh
  return model


def constrain(x, mesh: Optional[Mesh], *spec):
  """with_sharding_constraint(x, P(*spec)) on `mesh`; identity without a mesh."""
  if mesh is None or mesh.size == 1:
    return x
  return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, P(*spec)))


def constrain_batch(x, mesh: Optional[Mesh]):
  """Activations [B, ...]: batch over "data" when it divides, replicated over "model"."""
  if mesh is None or mesh.size == 1:
    return x
  return constrain(x, mesh, batch_axis(mesh, x.shape[0]), *([None] * (x.ndim - 1)))


def token_axis(mesh: Optional[Mesh], n_tokens: int) -> Optional[str]:
  """The mesh axis that splits a block's flattened tokens [N = B*T, ...] (batch-major rows): "data" when
  N divides by it, else None (replicated). Tokens are always replicated over "model"."""
  return batch_axis(mesh, n_tokens)


def per_data_group(fn: Callable, mesh: Optional[Mesh], *tokens):
  """fn(*tokens), each data group on its own tokens: every tokens[i] [N, ...] split over "data" by
  `token_axis` (replicated over "model"); fn's outputs [N, ...] split the same way. fn may read
  replicated parameters (closed over). Without a data split: plain fn(*tokens).

  For ops that XLA's SPMD partitioner does not split by rows: it replicates lax.top_k over a
  row-split operand, i.e. the noaux_tc router would all-gather its [N, E] scores over "data" in every
  MoE layer and route all data groups' tokens on every device."""
  axis = token_axis(mesh, tokens[0].shape[0]) if data_size(mesh) > 1 else None
  if axis is None:
    return fn(*tokens)
  return jax.shard_map(fn, mesh=mesh, in_specs=P(axis), out_specs=P(axis), check_vma=False)(*tokens)


# ---- generation state --------------------------------------------------------------------------

def state_shardings(state, mesh: Mesh, drafter_cfg=None):
  """Shardings of a GenerationState: every [B, ...] buffer split by batch over "data" when it divides
  (the latent cache replicated over "model"); the drafter's K/V [B, S, KVH, hd] also split by KV head
  over "model" when they divide; the PRNG key replicated."""
  batch = state.bonus.shape[0]
  bax = batch_axis(mesh, batch)
  kv_split = drafter_cfg is not None and splits(mesh, drafter_cfg.num_key_value_heads)
  dc = state.drafter_cache

  def one(path, leaf):
    shape = getattr(leaf, "shape", ())
    if not shape or shape[0] != batch:
      return NamedSharding(mesh, P())
    rest = [None] * (len(shape) - 1)
    if kv_split and len(shape) == 4 and dc is not None and any(leaf is a for a in (*dc.k, *dc.v)):
      rest[1] = MODEL
    return NamedSharding(mesh, P(bax, *rest))
  return jax.tree_util.tree_map_with_path(one, state)


# ---- training state (the trainers: data parallel) ----------------------------------------------

def train_state_shardings(state, mesh: Mesh, rule: Callable) -> Any:
  """Shardings of a training state {"params": {path: array}, "opt": optax state}: every parameter by the
  path rule (target_rule / drafter_rule; on a DATAx1 mesh all replicated: plain data parallel); an
  optimizer leaf under a parameter's path with that parameter's shape (Adam's mu and nu) like the
  parameter; the rest (Adam's step count) replicated."""
  params = state["params"]

  def one(path, leaf):
    key = getattr(path[-1], "key", None) if path else None
    shape = tuple(getattr(leaf, "shape", ()))
    if isinstance(key, str) and key in params and tuple(params[key].shape) == shape:
      return rule(key, shape)
    return NamedSharding(mesh, P())
  return jax.tree_util.tree_map_with_path(one, state)


def batch_sharding(mesh: Mesh, shape: Sequence[int]) -> NamedSharding:
  """A host batch [B, ...] of a training or evaluation step: B split over "data" when it divides (the
  trainers require it of the training batch), else replicated; replicated over "model"."""
  return NamedSharding(mesh, P(batch_axis(mesh, shape[0]), *([None] * (len(shape) - 1))))


def host_value(x) -> np.ndarray:
  """The full value of an array on this host (the inverse of `put_global`). A collective when `x` is
  split over devices of several processes: every process must call it, in the same order."""
  if not isinstance(x, jax.Array) or x.is_fully_addressable or x.is_fully_replicated:
    return np.asarray(x)
  from jax.experimental import multihost_utils
  return np.asarray(multihost_utils.process_allgather(x, tiled=True))
