"""Memory plan: bytes per device of weights, caches and activations for a config on a mesh.

Weights: every parameter's shard, by the partition rules of sharding.py (exact, from the abstract model).
Caches (exact): the target's latent cache, replicated over "model" (c_kv + k_pe per token per layer:
70,272 B/token for K2.6 in bf16), split by batch over "data" when the batch divides; the drafter's K/V
cache, split by KV head over "model".
Activations (an estimate of the peak of the largest program, not an XLA buffer assignment):
- a round verifying T = budget + 1 tokens: hidden states, fp32 logits [B, T, V/n] (and the drafter's
  [B, L, V/n]) with their log-softmax / filter temporaries, MoE rows (T * top_k pairs), the attention
  scores [B, T, H/n, S] fp32 when the XLA attention is used (the Pallas kernel keeps them on chip);
- one forward of the prefill, over a chunk of C = min(prefill_chunk, P) prompt tokens (spec/prefill.py;
  C = P when the prompt is prefilled in one forward): expanded MLA with per-head keys/values of the whole
  cache [B, S, H/n, 128+128] and fp32 scores [B, C, H/n, S], the MoE rows of C tokens, and the logits of
  one row per sequence;
the larger of the two counts, plus `reserve` for XLA workspace / CUDA context.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Optional

GB = 1e9
GIB = 2 ** 30


class PlanError(ValueError):
  """A plan that does not fit, with what to change."""


@dataclasses.dataclass(frozen=True)
class Plan:
  mesh: tuple[int, int]          # (data, model)
  context: int                   # cache capacity (tokens per sequence)
  batch: int
  budget: int                    # tree nodes per round (0: AR)
  prompt_len: int
  prefill_chunk: int             # prompt tokens per prefill forward (= prompt_len: one forward)
  weights: int                   # bytes per device
  drafter_weights: int
  target_cache: int
  drafter_cache: int
  act_round: int
  act_prefill: int
  reserve: int
  device_bytes: Optional[int] = None
  cache_bytes_per_token: int = 0          # target latent cache, per sequence, on every device
  drafter_cache_bytes_per_token: int = 0  # per sequence, per device

  @property
  def activations(self) -> int:
    return max(self.act_round, self.act_prefill)

  @property
  def total(self) -> int:
    return (self.weights + self.drafter_weights + self.target_cache + self.drafter_cache + self.activations
            + self.reserve)

  @property
  def fits(self) -> bool:
    return self.device_bytes is None or self.total <= self.device_bytes

  def _chunking(self) -> str:
    if not self.prompt_len:
      return ""
    if self.prefill_chunk >= self.prompt_len:
      return " (prefilled in one forward)"
    return f" (prefilled in {math.ceil(self.prompt_len / self.prefill_chunk)} chunks of {self.prefill_chunk:,})"

  def lines(self) -> list[str]:
    d, m = self.mesh
    g = lambda x: f"{x / GB:9.2f} GB"
    out = [f"mesh {d}x{m} (data x model), context {self.context:,} tokens, batch {self.batch}, "
           f"budget {self.budget}, prompt {self.prompt_len:,} tokens" + self._chunking(),
           f"  weights (target)        {g(self.weights)}",
           f"  weights (drafter)       {g(self.drafter_weights)}",
           f"  target latent cache     {g(self.target_cache)}   ({self.cache_bytes_per_token:,} B/token/sequence, "
           f"replicated over model)",
           f"  drafter KV cache        {g(self.drafter_cache)}   ({self.drafter_cache_bytes_per_token:,} B/token/sequence)",
           f"  activations (round)     {g(self.act_round)}",
           f"  activations (prefill)   {g(self.act_prefill)}",
           f"  reserve (XLA, runtime)  {g(self.reserve)}",
           f"  total per device        {g(self.total)}"]
    if self.device_bytes is not None:
      free = self.device_bytes - self.total
      out.append(f"  device memory           {g(self.device_bytes)}   -> "
                 + (f"fits ({free / GB:.2f} GB free)" if free >= 0 else f"DOES NOT FIT ({-free / GB:.2f} GB over)"))
    return out


def _param_bytes_per_device(shapes: dict, mesh_shape, cfg, rules) -> int:
  from ddtree_jax import sharding
  mesh = _FakeMesh(mesh_shape)
  total = 0
  for path, s in shapes.items():
    spec = sharding.spec_for(path, s.shape, mesh, cfg, rules)
    n = 1
    for ax in spec:
      if ax is not None:
        n *= mesh.shape[ax]
    total += math.prod(s.shape) * s.dtype.itemsize // n
  return total


class _FakeMesh:
  """Just the axis sizes (plans need no devices)."""
  def __init__(self, mesh_shape):
    from ddtree_jax import sharding
    self.shape = {sharding.DATA: mesh_shape[0], sharding.MODEL: mesh_shape[1]}
    self.size = mesh_shape[0] * mesh_shape[1]


def target_param_shapes(cfg, dtype):
  from ddtree_jax.checkpoint.load import abstract_target, param_shapes
  return param_shapes(abstract_target(cfg, dtype))


def drafter_param_shapes(dcfg, dtype):
  from flax import nnx
  from ddtree_jax.checkpoint.load import param_shapes
  from ddtree_jax.model.dflash import DFlashDrafter
  return param_shapes(nnx.eval_shape(lambda: DFlashDrafter(dcfg, dtype=dtype, rngs=nnx.Rngs(0))))


@functools.lru_cache(maxsize=64)
def _weight_bytes_per_device(model: str, cfg, dtype, mesh_shape: tuple) -> int:
  """Per-device parameter bytes of the target or drafter of `cfg` (a frozen, hashable config) on a mesh.
  Cached: the abstract model of K2.6 takes seconds to build, and advice() makes dozens of plans of one config."""
  from ddtree_jax import sharding
  if model == "target":
    return _param_bytes_per_device(target_param_shapes(cfg, dtype), mesh_shape, cfg, sharding.TARGET_RULES)
  return _param_bytes_per_device(drafter_param_shapes(cfg, dtype), mesh_shape, cfg, sharding.DRAFTER_RULES)


def make_plan(cfg, mesh_shape: tuple[int, int], *, context: int, batch: int = 1, budget: int = 0, dcfg=None,
              prompt_len: int = 0, prefill_chunk: Optional[int] = None, dtype_bytes: int = 2, attention: str = "pallas", moe: str = "pallas",
              device_bytes: Optional[int] = None, reserve: int = 2 * GIB, target_weights: Optional[int] = None,
              drafter_weights: Optional[int] = None) -> Plan:
  """Bytes per device. mesh_shape: (data, model). prefill_chunk: prompt tokens per prefill forward (the
  engine's Engine(prefill_chunk=...)); None or 0: the whole prompt in one forward. attention / moe: "pallas" (GPU kernels: scores and
  dequantised experts stay on chip) or "xla" (the reference: materialised). target_weights /
  drafter_weights: per-device bytes when already known (else computed from the abstract model)."""
  import jax.numpy as jnp
  data, model = mesh_shape
  dt = {2: jnp.bfloat16, 4: jnp.float32}[dtype_bytes]
  if target_weights is None:
    target_weights = _weight_bytes_per_device("target", cfg, dt, tuple(mesh_shape))
  if drafter_weights is None:
    drafter_weights = _weight_bytes_per_device("drafter", dcfg, dt, tuple(mesh_shape)) if dcfg is not None else 0
  b_l = batch // data if data > 1 and batch % data == 0 else batch
  per_tok = cfg.num_hidden_layers * cfg.latent_dim * dtype_bytes
  target_cache = b_l * context * per_tok
  d_per_tok = 0
  if dcfg is not None:
    kvh = dcfg.num_key_value_heads
    kvh_l = kvh // model if model > 1 and kvh % model == 0 else kvh
    d_per_tok = dcfg.num_hidden_layers * 2 * kvh_l * dcfg.head_dim * dtype_bytes
  drafter_cache = b_l * context * d_per_tok

  def split(n):
    return n // model if model > 1 and n % model == 0 else n
  h_l, v_l = split(cfg.num_attention_heads), split(cfg.vocab_size)
  d, k = cfg.hidden_size, max(cfg.num_experts_per_tok, 1)
  e_l = split(cfg.n_routed_experts) if cfg.n_routed_experts else 0
  i_moe = cfg.moe_intermediate_size
  n_feat = len(dcfg.target_layer_ids) if dcfg is not None else 0

  def moe_rows(n_tok):
    rows = n_tok * k
    return rows * (d * dtype_bytes + 2 * i_moe * 4 + d * 4) + n_tok * d * 4

  def dequantised():
    return e_l * 3 * d * i_moe * dtype_bytes if (moe == "xla" and cfg.n_routed_experts) else 0

  t = budget + 1
  act_round = (b_l * t * d * 4 * 6                                # residual stream, norms, MLA projections
               + b_l * t * h_l * (cfg.kv_lora_rank + cfg.qk_head_dim) * 4 * 2
               + b_l * t * v_l * 4 * 3                           # target logits + filter / gumbel temporaries
               + b_l * t * n_feat * d * dtype_bytes              # drafter features
               + moe_rows(b_l * t) + dequantised())
  if dcfg is not None:
    l = dcfg.block_size - 1
    act_round += b_l * l * v_l * 4 * 3                            # drafter logits + log-softmax + top-K
  if attention == "xla":
    act_round += b_l * t * h_l * context * 4 * 2
  from ddtree_jax.spec.prefill import check_chunk
  try:
    prefill_chunk = check_chunk(prefill_chunk)
  except ValueError as e:
    raise PlanError(str(e)) from None
  c = min(prefill_chunk, prompt_len) if prefill_chunk else prompt_len   # tokens per prefill forward
  act_prefill = 0
  if c:
    act_prefill = (b_l * context * h_l * (cfg.qk_nope_head_dim + cfg.v_head_dim) * (dtype_bytes + 4)
                   + b_l * c * h_l * context * 4 * 2               # expanded MLA: fp32 scores + probabilities
                   + b_l * c * d * 4 * 6                           # hidden states of the chunk
                   + b_l * v_l * 4 * 3                             # logits of the last prompt token + sampling
                   + b_l * c * n_feat * d * dtype_bytes            # drafter features of the chunk
                   + moe_rows(b_l * c) + dequantised())
  return Plan(mesh=(data, model), context=context, batch=batch, budget=budget, prompt_len=prompt_len, prefill_chunk=c,
              weights=target_weights, drafter_weights=drafter_weights, target_cache=target_cache,
              drafter_cache=drafter_cache, act_round=act_round, act_prefill=act_prefill, reserve=reserve,
              device_bytes=device_bytes, cache_bytes_per_token=per_tok, drafter_cache_bytes_per_token=d_per_tok)


def _largest(fits, lo: int, hi: int) -> int:
  """Largest n in [lo, hi] with fits(n) (monotone), or lo - 1."""
  if not fits(lo):
    return lo - 1
  while lo < hi:
    mid = (lo + hi + 1) // 2
    if fits(mid):
      lo = mid
    else:
      hi = mid - 1
  return lo


def advice(plan: Plan, cfg, **kw) -> str:
  """What to change so that `plan` fits: the largest prefill chunk / context / batch / budget that fit, more
  devices. kw: the other make_plan arguments the plan was made with (dcfg, dtype_bytes, attention, moe)."""
  if plan.fits:
    return ""
  over = plan.total - plan.device_bytes
  base = dict(context=plan.context, batch=plan.batch, budget=plan.budget, prompt_len=plan.prompt_len,
              prefill_chunk=plan.prefill_chunk,
              device_bytes=plan.device_bytes, reserve=plan.reserve, target_weights=plan.weights,
              drafter_weights=plan.drafter_weights, **kw)
  tips = []
  fixed = plan.weights + plan.drafter_weights + plan.reserve
  if fixed > plan.device_bytes:
    tips.append(f"the weights alone ({fixed / GB:.1f} GB per device) exceed the device: use more devices on "
                f"the model axis (mesh {plan.mesh[0]}x{plan.mesh[1]} -> 1x{plan.mesh[0] * plan.mesh[1] * 2}) "
                f"or devices with more memory")
  else:
    def fits_with(**ch):
      return make_plan(cfg, plan.mesh, **{**base, **ch}).fits
    if plan.prompt_len:
      n = _largest(lambda n: fits_with(prefill_chunk=n), 1, plan.prefill_chunk)
      if 0 < n < plan.prefill_chunk:
        what = ("the one-shot prefill of {:,} tokens needs" if plan.prefill_chunk >= plan.prompt_len
                else "prefill chunks of {:,} tokens need").format(plan.prefill_chunk)
        tips.append(f"--prefill_chunk <= {n:,} ({what} {plan.act_prefill / GB:.1f} GB of activations)")
    c = _largest(lambda n: fits_with(context=n, prompt_len=min(plan.prompt_len, n)), 1, plan.context)
    if c >= 1:
      tips.append(f"--context <= {c:,}")
    if plan.batch > 1:
      b = _largest(lambda n: fits_with(batch=n), 1, plan.batch)
      if b >= 1:
        tips.append(f"--batch <= {b}")
    if plan.budget > 1:
      n = _largest(lambda n: fits_with(budget=n), 1, plan.budget)
      if n >= 1:
        tips.append(f"--budget <= {n}")
  return (f"needs {plan.total / GB:.2f} GB per device but the device has {plan.device_bytes / GB:.2f} GB "
          f"({over / GB:.2f} GB over); change one of: " + "; ".join(tips or ["use more devices"]))


def k26_drafter(target):
  """The public Kimi K2.5 DFlash drafter's shape (REFERENCE.md section 2), for K2.6 plans."""
  from ddtree_jax.config import DFlashConfig, RopeScaling
  return DFlashConfig(vocab_size=target.vocab_size, hidden_size=7168, num_hidden_layers=6, num_attention_heads=64,
                      num_key_value_heads=8, head_dim=128, intermediate_size=18432, block_size=8,
                      mask_token_id=163838, target_layer_ids=(1, 12, 24, 35, 47, 58), num_target_layers=61,
                      rope_scaling=RopeScaling(type="yarn", factor=64.0, original_max_position_embeddings=4096))


# ---- the engine's check ------------------------------------------------------------------------

def _device_bytes_per_device(tree) -> int:
  import jax
  total = 0
  for a in jax.tree_util.tree_leaves(tree):
    if hasattr(a, "sharding") and hasattr(a, "dtype"):
      total += math.prod(a.sharding.shard_shape(a.shape)) * a.dtype.itemsize
  return total


def device_memory_limit() -> Optional[int]:
  """The accelerator's memory (bytes_limit of the first local device), or None when it is not reported
  (e.g. the CPU)."""
  import jax
  try:
    stats = jax.local_devices()[0].memory_stats()
  except Exception:  # backends without memory stats
    return None
  return int(stats["bytes_limit"]) if stats and "bytes_limit" in stats else None


def check_engine(engine, *, batch: int, capacity: int, prompt_tokens: int, budget: int,
                 prefill_chunk: Optional[int] = None, device_bytes: Optional[int] = None):
  """Raises PlanError before allocating when the engine's caches and activations cannot fit beside its
  weights. prefill_chunk: tokens per prefill forward (default: the engine's). Without a known device
  memory (CPU) nothing is checked."""
  device_bytes = device_bytes if device_bytes is not None else device_memory_limit()
  if device_bytes is None:
    return None
  from ddtree_jax import sharding
  mesh = engine.mesh
  shape = (sharding.data_size(mesh), sharding.model_size(mesh))
  import jax
  on_gpu = jax.default_backend() == "gpu"
  kw = dict(dcfg=engine.drafter_cfg, dtype_bytes=jax.numpy.dtype(engine.cache_dtype).itemsize,
            attention="pallas" if on_gpu else "xla", moe="pallas" if on_gpu else "xla")
  p = make_plan(engine.target_cfg, shape, context=capacity, batch=batch, budget=budget,
                prompt_len=prompt_tokens, prefill_chunk=prefill_chunk or getattr(engine, "prefill_chunk", None),
                **kw, device_bytes=device_bytes, reserve=min(2 * GIB, device_bytes // 10),
                target_weights=_device_bytes_per_device(engine._t_params),
                drafter_weights=_device_bytes_per_device(engine._d_params) if engine._d_params is not None else 0)
  if not p.fits:
    raise PlanError("memory plan: " + advice(p, engine.target_cfg, **kw) + "\n" + "\n".join(p.lines()))
  return p
