"""The drafter's rotary embedding: Qwen3 / HF rotate-half pairing, with HF transformers' YaRN semantics.

Pairs (x[i], x[i + hd/2]) rotate by angle pos * inv_freq[i] (HF `rotate_half`), unlike the target's
interleaved DeepSeek pairing (model/rope.py). YaRN follows transformers' `_compute_yarn_parameters`
(checked against transformers 5.24): the inverse frequencies blend interpolation (1 / (factor *
theta^(2i/d))) and extrapolation with a linear ramp between the truncated (floor/ceil) correction dims
of beta_fast / beta_slow at original_max_position_embeddings — the same formula as the target's, so it
is reused — and cos and sin are both multiplied by `attention_factor`, which (when not given) is
  get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)   if mscale and mscale_all_dim are set,
  get_mscale(factor) = 0.1 * ln(factor) + 1                          otherwise,
which differs from the DeepSeek rule (mscale alone is ignored by HF when mscale_all_dim is absent).
Not representable in `RopeScaling` (so not supported): an explicit `attention_factor`, `truncate: false`.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ddtree_jax.config import RopeScaling, yarn_mscale
from ddtree_jax.model.rope import yarn_inv_freq


def hf_yarn_attention_factor(scaling: RopeScaling) -> float:
  if scaling.type != "yarn" or scaling.factor <= 1.0:
    return 1.0
  if scaling.mscale and scaling.mscale_all_dim:
    return float(yarn_mscale(scaling.factor, scaling.mscale) / yarn_mscale(scaling.factor, scaling.mscale_all_dim))
  return float(yarn_mscale(scaling.factor, 1.0))


def qwen3_rope_params(head_dim: int, theta: float, scaling: RopeScaling) -> tuple[np.ndarray, float]:
  """Returns (inv_freq [head_dim/2] float64, attention_factor) as HF computes them."""
  inv_freq, _ = yarn_inv_freq(head_dim, theta, scaling)   # plain RoPE when scaling.type != 'yarn'
  return inv_freq, hf_yarn_attention_factor(scaling)


def rope_cos_sin_half(positions, inv_freq, attention_factor: float):
  """positions: int [...] -> cos, sin: fp32 [..., hd/2] (times attention_factor)."""
  ang = positions.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq, jnp.float32)
  return jnp.cos(ang) * attention_factor, jnp.sin(ang) * attention_factor


def apply_rope_half(x, cos, sin):
  """x: [..., hd] (halves paired, HF rotate_half); cos/sin broadcastable to [..., hd/2]."""
  xf = x.astype(jnp.float32)
  h = x.shape[-1] // 2
  x1, x2 = xf[..., :h], xf[..., h:]
  return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)
