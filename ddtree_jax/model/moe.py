"""The MoE block of DeepSeek-V3: noaux_tc router, routed experts (INT4 or dense) and shared experts."""
from flax import nnx

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

  def __call__(self, x):
    """x: [B, T, D] -> [B, T, D]."""
    b, t, d = x.shape
    flat = x.reshape(b * t, d)
    ids, weights = self.gate(flat)
    y = self.experts(flat, ids, weights)
    if self.shared_experts is not None:
      y = y + self.shared_experts(flat)
    return y.reshape(b, t, d)
