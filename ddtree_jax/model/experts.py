"""Routed experts: INT4 in the compressed-tensors layout (HF [out, in] orientation) or dense.

The INT4 storage is the checkpoint's: per expert `weight_packed` int32 [out, in/8] and `weight_scale`
[out, in/group], stacked over experts. On a GPU the Engine re-lays them once, k-chunked (`use_k_chunks`; the same
words and scales in an order whose kernel tiles are contiguous). Computation goes through custom_calls.
"""
import functools

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
    """The stacked expert arrays, in the order `apply` takes them (for shard_map). Stored layout (above) or,
    after `use_k_chunks`, k-chunked: words [E, in/C, out, C/8], scales [E, in/C, out, C/g]."""
    return (self.gate_packed[...], self.gate_scale[...], self.up_packed[...], self.up_scale[...],
            self.down_packed[...], self.down_scale[...])

  def use_k_chunks(self, chunk: int):
    """Re-lays the six arrays k-chunked (custom_calls/moe_int4/k_chunks.py) in place, once, keeping each
    array's expert sharding; the old arrays are released. The kernels read tiles of this layout as contiguous
    blocks (benchmarks/RESULTS.md, issue 6 tenth round); the XLA reference converts back on the fly."""
    for w_name, s_name in (("gate_packed", "gate_scale"), ("up_packed", "up_scale"), ("down_packed", "down_scale")):
      w_var, s_var = getattr(self, w_name), getattr(self, s_name)
      if w_var[...].ndim == 4:
        continue                                                   # already k-chunked
      packed, scale = _to_k_chunks(w_var.get_value(), s_var.get_value(), chunk, self.group_size)
      w_var.set_value(packed)                                      # a new array (new shape), not an update
      s_var.set_value(scale)

  def apply(self, arrays, x, ids, weights, expert_offset=0):
    return custom_calls.routed_experts_int4(x, ids, weights, *arrays, group_size=self.group_size,
                                            expert_offset=expert_offset)

  def __call__(self, x, ids, weights, expert_offset=0):
    return self.apply(self.arrays(), x, ids, weights, expert_offset)


def _to_k_chunks(packed, scale, chunk, group_size):
  """k_chunks.to_k_chunks as one compiled program whose outputs keep the inputs' expert-axis sharding."""
  out = None
  sharding = getattr(packed, "sharding", None)
  if isinstance(sharding, jax.sharding.NamedSharding):            # the expert axis (dim 0) keeps its mesh axis
    expert_axis = sharding.spec[0] if len(sharding.spec) else None
    four = jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec(expert_axis, None, None, None))
    out = (four, four)
  return _k_chunker(chunk, group_size, out)(packed, scale)


@functools.lru_cache(maxsize=None)
def _k_chunker(chunk, group_size, out_shardings):
  """One jitted re-laying per (chunk, group size, output sharding): K2.6's 60 MoE layers share two programs
  (gate/up shapes and down shapes) instead of compiling 180. Not donated: other holders of the stored arrays
  keep valid ones; the stored arrays are freed when the last reference goes (one layer at a time)."""
  from custom_calls.moe_int4.k_chunks import to_k_chunks
  return jax.jit(lambda w, s: to_k_chunks(w, s, chunk, group_size=group_size), out_shardings=out_shardings)


MOE_LAYOUTS = ("auto", "as_is", "k_chunks")


def kernel_k_chunk(cfg: ModelConfig, layout: str = "auto"):
  """The k-chunk size for the INT4 experts of a model with `cfg`, or None for the stored layout.

  layout "auto": k-chunked (custom_calls.moe_int4.KERNEL_K_CHUNK inputs) when the GPU kernels will run them
  (a GPU backend, INT4 experts that custom_calls.moe_int4.kernel_chunk_fits), else stored (the XLA reference on
  other backends reads the stored layout without converting); "as_is" (no re-laying: whatever layout the model has);
  "k_chunks" (wherever the shapes allow, else an error)."""
  from custom_calls.moe_int4 import KERNEL_K_CHUNK, kernel_chunk_fits
  if layout not in MOE_LAYOUTS:
    raise ValueError(f"moe_layout must be one of {MOE_LAYOUTS}, got {layout!r}")
  g = cfg.quantization.group_size if cfg.experts_int4 else None
  fits = cfg.experts_int4 and kernel_chunk_fits(cfg.hidden_size, cfg.moe_intermediate_size, g, KERNEL_K_CHUNK)
  if layout == "as_is" or not fits or (layout == "auto" and jax.default_backend() != "gpu"):
    if layout == "k_chunks" and not fits:
      raise ValueError(f"moe_layout 'k_chunks' needs INT4 experts with hidden_size ({cfg.hidden_size}) and "
                       f"moe_intermediate_size ({cfg.moe_intermediate_size}) multiples of {KERNEL_K_CHUNK} and a "
                       f"group size of 8-128 (got {g})")
    return None
  return KERNEL_K_CHUNK


def use_kernel_layout(model, chunk: int) -> int:
  """Puts every Int4Experts of `model` in the k-chunked layout (in place). Returns how many were converted."""
  n = 0
  for _, m in nnx.iter_graph(model):
    if isinstance(m, Int4Experts):
      m.use_k_chunks(chunk)
      n += 1
  return n


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
