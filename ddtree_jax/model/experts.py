"""Routed experts: INT4 in the compressed-tensors layout (HF [out, in] orientation) or dense.

The INT4 storage is exactly the checkpoint's: per expert `weight_packed` int32 [out, in/8] and
`weight_scale` [out, in/group], stacked over experts. Computation goes through custom_calls.
"""
import jax
import jax.numpy as jnp
from flax import nnx

import custom_calls
from ddtree_jax.config import ModelConfig


class Int4Experts(nnx.Module):
  def __init__(self, cfg: ModelConfig, *, dtype, rngs: nnx.Rngs, num_experts: int | None = None):
    e = num_experts or cfg.n_routed_experts
    d, i = cfg.hidden_size, cfg.moe_intermediate_size
    self.group_size = cfg.quantization.group_size
    g = self.group_size
    # Random but valid INT4 words (every nibble pattern is a valid value) and small scales, so that a
    # freshly built model computes something non-trivial; real weights come from a checkpoint.
    def words(shape):
      return jax.random.randint(rngs.params(), shape, -2**31, 2**31 - 1, dtype=jnp.int32)
    def scales(shape):
      return jnp.full(shape, 0.02 / 4, jnp.bfloat16)
    self.gate_packed = nnx.Param(words((e, i, d // 8)))
    self.gate_scale = nnx.Param(scales((e, i, d // g)))
    self.up_packed = nnx.Param(words((e, i, d // 8)))
    self.up_scale = nnx.Param(scales((e, i, d // g)))
    self.down_packed = nnx.Param(words((e, d, i // 8)))
    self.down_scale = nnx.Param(scales((e, d, i // g)))

  def arrays(self):
    """The stacked expert arrays, in the order `apply` takes them (for shard_map)."""
    return (self.gate_packed[...], self.gate_scale[...], self.up_packed[...], self.up_scale[...],
            self.down_packed[...], self.down_scale[...])

  def apply(self, arrays, x, ids, weights, expert_offset=0):
    return custom_calls.routed_experts_int4(x, ids, weights, *arrays, group_size=self.group_size,
                                            expert_offset=expert_offset)

  def __call__(self, x, ids, weights, expert_offset=0):
    return self.apply(self.arrays(), x, ids, weights, expert_offset)


class DenseExperts(nnx.Module):
  """w_gate/w_up: [E, D, I]; w_down: [E, I, D] (JAX [in, out] orientation)."""
  def __init__(self, cfg: ModelConfig, *, dtype, rngs: nnx.Rngs, num_experts: int | None = None):
    e = num_experts or cfg.n_routed_experts
    d, i = cfg.hidden_size, cfg.moe_intermediate_size
    init = nnx.initializers.normal(0.02)
    self.w_gate = nnx.Param(init(rngs.params(), (e, d, i), dtype))
    self.w_up = nnx.Param(init(rngs.params(), (e, d, i), dtype))
    self.w_down = nnx.Param(init(rngs.params(), (e, i, d), dtype))

  def arrays(self):
    return (self.w_gate[...], self.w_up[...], self.w_down[...])

  def apply(self, arrays, x, ids, weights, expert_offset=0):
    return custom_calls.routed_experts_dense(x, ids, weights, *arrays, expert_offset=expert_offset)

  def __call__(self, x, ids, weights, expert_offset=0):
    return self.apply(self.arrays(), x, ids, weights, expert_offset)
