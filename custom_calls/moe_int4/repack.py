"""Load-time checks for the INT4 MoE kernels' arrays.

The Pallas kernels (pallas_triton.py, pallas_gemv.py) read the compressed-tensors `pack-quantized` arrays as
stored (int32 words [E, out, in/8], nibble j of word w = column 8w+j; scales [E, out, in/group]) and dequantise
them in registers. `repack` checks shapes and dtypes once at load time and returns the arrays in a named tuple
that can be splatted into `routed_experts_int4(x, ids, weights, *experts, ...)`.

The faster load-time layout is k_chunks.py's reordering (every kernel tile one contiguous block), which the model
applies on a GPU (ddtree_jax/model/experts.py `use_k_chunks`); `to_k_chunks` takes this tuple's pairs.
"""
from typing import NamedTuple

import jax
import jax.numpy as jnp


class Int4Experts(NamedTuple):
  gate_packed: jax.Array   # int32 [E, I, D/8]
  gate_scale: jax.Array    # [E, I, D/g]
  up_packed: jax.Array     # int32 [E, I, D/8]
  up_scale: jax.Array      # [E, I, D/g]
  down_packed: jax.Array   # int32 [E, D, I/8]
  down_scale: jax.Array    # [E, D, I/g]


def repack(gate_packed, gate_scale, up_packed, up_scale, down_packed, down_scale, *, group_size=32):
  """Validate the compressed-tensors expert arrays (stacked over local experts) for the kernel."""
  e, inter, d8 = gate_packed.shape
  d = d8 * 8
  want = {
      "gate_packed": (gate_packed, (e, inter, d // 8), jnp.int32),
      "up_packed": (up_packed, (e, inter, d // 8), jnp.int32),
      "down_packed": (down_packed, (e, d, inter // 8), jnp.int32),
      "gate_scale": (gate_scale, (e, inter, d // group_size), None),
      "up_scale": (up_scale, (e, inter, d // group_size), None),
      "down_scale": (down_scale, (e, d, inter // group_size), None),
  }
  for name, (arr, shape, dtype) in want.items():
    if tuple(arr.shape) != shape:
      raise ValueError(f"repack: {name} has shape {tuple(arr.shape)}, expected {shape} "
                       f"(E={e}, D={d}, I={inter}, group_size={group_size})")
    if dtype is not None and arr.dtype != dtype:
      raise TypeError(f"repack: {name} has dtype {arr.dtype}, expected {jnp.dtype(dtype).name}")
  return Int4Experts(gate_packed, gate_scale, up_packed, up_scale, down_packed, down_scale)
