"""SwiGLU MLP: down(silu(gate x) * up x). Used by the dense first layers and the shared expert."""
import jax
from flax import nnx


class SwiGLU(nnx.Module):
  def __init__(self, dim: int, hidden: int, *, dtype, rngs: nnx.Rngs):
    init = nnx.initializers.normal(0.02)
    self.gate_proj = nnx.Linear(dim, hidden, use_bias=False, dtype=dtype, param_dtype=dtype, kernel_init=init, rngs=rngs)
    self.up_proj = nnx.Linear(dim, hidden, use_bias=False, dtype=dtype, param_dtype=dtype, kernel_init=init, rngs=rngs)
    self.down_proj = nnx.Linear(hidden, dim, use_bias=False, dtype=dtype, param_dtype=dtype, kernel_init=init, rngs=rngs)

  def __call__(self, x):
    return self.down_proj(jax.nn.silu(self.gate_proj(x)) * self.up_proj(x))
