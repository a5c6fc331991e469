"""Rotary position embedding with YaRN scaling, in the interleaved (GPT-J) pairing of DeepSeek-V3.

Pairs (x[2i], x[2i+1]) rotate by angle pos * inv_freq[i]. HF transformers de-interleaves and uses
rotate-half; the attention scores are identical because q_pe and k_pe get the same permutation.
"""
import math

import jax.numpy as jnp
import numpy as np

from ddtree_jax.config import RopeScaling, yarn_mscale


def yarn_inv_freq(dim: int, theta: float, scaling: RopeScaling) -> tuple[np.ndarray, float]:
  """Returns (inv_freq [dim/2] float64, cos/sin multiplier)."""
  pos_freqs = theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
  inv_extrapolation = 1.0 / pos_freqs
  if scaling.type != "yarn" or scaling.factor <= 1.0:
    return inv_extrapolation, 1.0
  inv_interpolation = 1.0 / (scaling.factor * pos_freqs)

  def correction_dim(num_rotations):
    return (dim * math.log(scaling.original_max_position_embeddings / (num_rotations * 2 * math.pi))
            / (2 * math.log(theta)))

  low = max(math.floor(correction_dim(scaling.beta_fast)), 0)
  high = min(math.ceil(correction_dim(scaling.beta_slow)), dim - 1)
  if low == high:
    high += 0.001
  ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
  extrapolation_mask = 1.0 - ramp
  inv_freq = inv_interpolation * (1.0 - extrapolation_mask) + inv_extrapolation * extrapolation_mask
  multiplier = yarn_mscale(scaling.factor, scaling.mscale) / yarn_mscale(scaling.factor, scaling.mscale_all_dim)
  return inv_freq, multiplier


def rope_cos_sin(positions, inv_freq, multiplier):
  """positions: int [...]; inv_freq: [P/2] -> cos, sin: fp32 [..., P/2]."""
  ang = positions.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq, jnp.float32)
  return jnp.cos(ang) * multiplier, jnp.sin(ang) * multiplier


def apply_rope_interleaved(x, cos, sin):
  """x: [..., P] with pairs (2i, 2i+1); cos/sin broadcastable to [..., P/2]."""
  xf = x.astype(jnp.float32)
  x0, x1 = xf[..., 0::2], xf[..., 1::2]
  y0 = x0 * cos - x1 * sin
  y1 = x0 * sin + x1 * cos
  return jnp.stack([y0, y1], axis=-1).reshape(x.shape).astype(x.dtype)
