"""The MoE block of DeepSeek-V3: noaux_tc router, routed experts (INT4 or dense) and shared experts.

On a mesh (`sharding.with_mesh` sets `mesh`) the routed experts run expert-parallel inside `shard_map`:
tokens are replicated over the "model" axis (split over "data" like the batch: each data group routes and
runs only its own tokens, see sharding.per_data_group), each device runs its E/n local experts
(expert_offset = axis_index * E_local; pairs routed elsewhere contribute zero) plus its slice of the
shared expert's intermediate dimension, and one all-reduce (psum) combines both.
"""
import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import PartitionSpec as P

from ddtree_jax.config import ModelConfig
from ddtree_jax.model.experts import DenseExperts, Int4Experts
from ddtree_jax.model.mlp import SwiGLU
from ddtree_jax.model.router import Router


class MoE(nnx.Module):
  def __init__(self, cfg: ModelConfig, *, dtype, rngs: nnx.Rngs):
    self.gate = Router(cfg, dtype=dtype, rngs=rngs)
    experts_cls = Int4Experts if cfg.experts_int4 else DenseExperts
    self.experts = experts_cls(cfg, dtype=dtype, rngs=rngs)
    self.shared_experts = (SwiGLU(cfg.hidden_size, cfg.moe_intermediate_size * cfg.n_shared_experts,
                                  dtype=dtype, rngs=rngs) if cfg.n_shared_experts else None)
    self.n_experts = cfg.n_routed_experts
    self.shared_size = cfg.moe_intermediate_size * cfg.n_shared_experts
    self.mesh = None   # a jax.sharding.Mesh when the program runs on one (sharding.with_mesh)

  def __call__(self, x):
    """x: [B, T, D] -> [B, T, D]."""
    b, t, d = x.shape
    flat = x.reshape(b * t, d)
    from ddtree_jax import sharding
    ids, weights = sharding.per_data_group(self.gate, self.mesh, flat)   # each data group routes its tokens
    if sharding.splits(self.mesh, self.n_experts):
      return self._expert_parallel(flat, ids, weights).reshape(b, t, d)
    y = sharding.per_data_group(self.experts, self.mesh, flat, ids, weights)   # experts replicated here
    if self.shared_experts is not None:
      y = y + self.shared_experts(flat)
    return y.reshape(b, t, d)

  def _expert_parallel(self, flat, ids, weights):
    """flat: [N, D]; ids, weights: [N, K] (replicated over "model") -> [N, D]."""
    from ddtree_jax import sharding
    mesh, model = self.mesh, sharding.MODEL
    e_local = self.n_experts // sharding.model_size(mesh)
    row = sharding.token_axis(mesh, flat.shape[0]) if sharding.data_size(mesh) > 1 else None
    experts = self.experts.arrays()
    expert_specs = tuple(P(model, *([None] * (a.ndim - 1))) for a in experts)
    se = self.shared_experts
    shared_split = se is not None and sharding.splits(mesh, self.shared_size)
    shared = ((se.gate_proj.kernel[...], se.up_proj.kernel[...], se.down_proj.kernel[...])
              if shared_split else ())
    shared_specs = (P(None, model), P(None, model), P(model, None)) if shared_split else ()
    tok = P(row, None)

    def body(x, ids, w, experts, shared):
      offset = jax.lax.axis_index(model) * e_local
      y = self.experts.apply(experts, x, ids, w, expert_offset=offset).astype(jnp.float32)
      if shared:
        wg, wu, wd = shared
        h = jax.nn.silu(jnp.dot(x, wg.astype(x.dtype))) * jnp.dot(x, wu.astype(x.dtype))
        y = y + jnp.dot(h, wd.astype(x.dtype)).astype(jnp.float32)
      return jax.lax.psum(y, model)          # the one all-reduce of the block

    y = jax.shard_map(body, mesh=mesh, in_specs=(tok, tok, tok, expert_specs, shared_specs), out_specs=tok,
                      check_vma=False)(flat, ids, weights, experts, shared)
    y = y.astype(flat.dtype)
    if se is not None and not shared_split:
      y = y + se(flat)
    return y
