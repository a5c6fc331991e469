"""RMSNorm (computed in fp32, weight applied in the input dtype as in the official code)."""
import jax
import jax.numpy as jnp
from flax import nnx


def rms_norm(x, weight, eps):
  """x: [..., D]; weight: [D]."""
  xf = x.astype(jnp.float32)
  xf = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
  return (xf * weight.astype(jnp.float32)).astype(x.dtype)


class RMSNorm(nnx.Module):
  def __init__(self, dim: int, eps: float, *, dtype, rngs: nnx.Rngs | None = None):
    del rngs
    self.weight = nnx.Param(jnp.ones((dim,), dtype))
    self.eps = eps

  def __call__(self, x):
    return rms_norm(x, self.weight[...], self.eps)
