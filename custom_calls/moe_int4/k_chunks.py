"""An optional load-time layout of the INT4 expert arrays: K-chunk-major ("k-chunked").

As stored (compressed-tensors, layout.py) an expert matrix is row-major over its outputs: words [E, N, K/8],
scales [E, N, K/g]. A kernel tile of BN output rows x BK inputs is then BN separate segments of BK/2 bytes
(128 bytes at BK 256), one per row, 3.5 KB apart at K2.6's D = 7168.

K-chunked with chunk C (a multiple of the group size and of 8): words [E, K/C, N, C/8], scales [E, K/C, N, C/g];
chunk c holds inputs [c*C, (c+1)*C) of every output row, rows consecutive. A tile of any BN rows x BK <= C
inputs (C % BK == 0) inside one chunk is then BN * BK/2 contiguous bytes when BK == C (one segment per tile),
and BN segments of BK/2 bytes C/2 apart otherwise. Same words, same nibbles, same scales: only the order of the
array's elements changes. The grouped kernel, and the gemv with a K step inside one chunk, give identical bits in
both layouts; the gemv with a K step of several chunks sums a tile's products in another order (differences at
the float32 rounding level).

The kernels (pallas_triton.py, pallas_gemv.py) accept either layout: `load_word_tile` / `load_scale_tile`
below index a 3-D (as stored) or 4-D (k-chunked) ref. The XLA reference takes the stored layout
(`from_k_chunks`).
"""
from __future__ import annotations

import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl


def to_k_chunks(packed, scale, chunk, *, group_size=32):
  """Stored layout -> k-chunked.

  packed: int32 [E, N, K/8]; scale: [E, N, K/g] -> ([E, K/C, N, C/8], [E, K/C, N, C/g])."""
  e, n, k8 = packed.shape
  k = k8 * 8
  if chunk % 8 or chunk % group_size or k % chunk:
    raise ValueError(f"to_k_chunks: chunk {chunk} must be a multiple of 8 and of group_size {group_size} and "
                     f"divide K = {k} (packed {tuple(packed.shape)})")
  if scale.shape != (e, n, k // group_size):
    raise ValueError(f"to_k_chunks: scale has shape {tuple(scale.shape)}, expected {(e, n, k // group_size)} "
                     f"for packed {tuple(packed.shape)} and group_size {group_size}")
  nc = k // chunk
  words = packed.reshape(e, n, nc, chunk // 8).transpose(0, 2, 1, 3)
  scales = scale.reshape(e, n, nc, chunk // group_size).transpose(0, 2, 1, 3)
  return words, scales


def experts_to_k_chunks(experts, chunk, *, group_size=32):
  """to_k_chunks on the six expert arrays in routed_experts_int4's order (gate words, gate scales, up ..., down ...)."""
  return sum((to_k_chunks(experts[i], experts[i + 1], chunk, group_size=group_size) for i in (0, 2, 4)), ())


# The scale group sizes the GPU kernels take (pallas_triton.py, pallas_gemv.py): the words of one group adjacent,
# a group no wider than a 128-input tile.
KERNEL_GROUP_SIZES = (8, 16, 32, 64, 128)


def kernel_chunk_fits(hidden, inter, group_size, chunk):
  """Whether experts of hidden size D, intermediate size I and this group size can be k-chunked by `chunk` for the
  GPU kernels: D and I multiples of the chunk, a kernel group size (8-128) that divides it."""
  return group_size in KERNEL_GROUP_SIZES and chunk % group_size == 0 and hidden % chunk == 0 and inter % chunk == 0


def from_k_chunks(packed, scale):
  """k-chunked -> stored layout. packed: [E, K/C, N, C/8]; scale: [E, K/C, N, C/g] -> ([E, N, K/8], [E, N, K/g])."""
  e, nc, n, cw = packed.shape
  words = packed.transpose(0, 2, 1, 3).reshape(e, n, nc * cw)
  scales = scale.transpose(0, 2, 1, 3).reshape(e, n, nc * scale.shape[3])
  return words, scales


def logical_shape(packed):
  """(E, N, K/8) of an expert word array in either layout."""
  if packed.ndim == 3:
    return tuple(packed.shape)
  if packed.ndim == 4:
    e, nc, n, cw = packed.shape
    return e, n, nc * cw
  raise ValueError(f"expert words must be [E, N, K/8] or k-chunked [E, K/C, N, C/8], got shape {tuple(packed.shape)}")


def scale_shape(packed, group_size):
  """The shape the group scales of an expert word array must have, in the words' layout."""
  if packed.ndim == 4:
    e, nc, n, cw = packed.shape
    return e, nc, n, cw * 8 // group_size
  e, n, k8 = logical_shape(packed)
  return e, n, k8 * 8 // group_size


def check_scale(name, what, packed, scale, group_size):
  """Raise (naming `what`) unless the scale array has the shape of its words at group_size, in the same layout."""
  if tuple(scale.shape) != scale_shape(packed, group_size):
    raise ValueError(f"{name}: {what} has shape {tuple(scale.shape)}, expected {scale_shape(packed, group_size)} "
                     f"for words {tuple(packed.shape)} at group_size {group_size}")


def check_scales(name, gate_packed, gate_scale, up_scale, down_packed, down_scale, group_size):
  """Raise unless every scale array has the shape of its words at group_size, in the same layout."""
  for what, packed, scale in (("gate_scale", gate_packed, gate_scale), ("up_scale", gate_packed, up_scale),
                              ("down_scale", down_packed, down_scale)):
    check_scale(name, what, packed, scale, group_size)


def chunk_inputs(packed):
  """C (inputs per chunk) of a k-chunked word array; None for the stored layout."""
  return packed.shape[3] * 8 if packed.ndim == 4 else None


def block_k_fits(packed, block_k, *, multiples=False):
  """Whether a kernel's K step of block_k inputs lies inside one chunk of `packed` (or, multiples=True, is a
  whole number of chunks). Stored-layout arrays always fit."""
  c = chunk_inputs(packed)
  return c is None or (block_k <= c and c % block_k == 0) or (multiples and block_k % c == 0)


def check_block_k(name, packed, block_k, *, multiples=False, what="block_k"):
  """Raise (naming the parameter `what`) unless block_k_fits."""
  if not block_k_fits(packed, block_k, multiples=multiples):
    raise ValueError(f"{name}: {what} {block_k} must divide the k-chunk size {chunk_inputs(packed)}"
                     + (" or be a multiple of it" if multiples else "")
                     + f" (k-chunked expert words {tuple(packed.shape)})")


def load_word_tile(w_ref, e, n0, block_n, kw0, bk8):
  """int32 [BN, BK/8]: words of expert e, output rows [n0, n0 + BN), word columns [kw0, kw0 + BK/8).

  w_ref: [E, N, K/8] (stored) or [E, K/C, N, C/8] (k-chunked; the tile must lie inside one chunk)."""
  if w_ref.ndim == 3:
    return w_ref[e, pl.ds(n0, block_n), pl.ds(kw0, bk8)]
  chunk, col = _div_rem(kw0, w_ref.shape[3])
  cols = slice(None) if bk8 == w_ref.shape[3] else pl.ds(col, bk8)     # a whole chunk: a static slice
  return w_ref[e, chunk, pl.ds(n0, block_n), cols]


def load_scale_tile(s_ref, e, n0, block_n, kg0, bkg):
  """[BN, BK/g]: group scales of expert e, rows [n0, n0 + BN), groups [kg0, kg0 + BK/g) (either layout)."""
  if s_ref.ndim == 3:
    return s_ref[e, pl.ds(n0, block_n), pl.ds(kg0, bkg)]
  chunk, col = _div_rem(kg0, s_ref.shape[3])
  cols = slice(None) if bkg == s_ref.shape[3] else pl.ds(col, bkg)
  return s_ref[e, chunk, pl.ds(n0, block_n), cols]


def _div_rem(a, b):
  """a // b, a % b for a >= 0 (static or traced). lax's, not jnp's: jnp's sign fix-up for negative operands
  does not lower to Triton (an i1 operand meets an i32 one)."""
  if isinstance(a, int):
    return divmod(a, b)
  return lax.div(a, jnp.int32(b)), lax.rem(a, jnp.int32(b))
