"""The compressed-tensors `pack-quantized` INT4 layout (symmetric, group-wise along the input dim).

weight_packed: int32 [out, in/8]; nibble j of word w (bits 4j..4j+3, least significant first) holds
column 8w+j as the unsigned value q + 8 with q in [-8, 7].
weight_scale: [out, in/group] (bf16 in Kimi checkpoints). W[o, k] = q[o, k] * scale[o, k // group].
Leading batch dims (e.g. experts) are allowed on every function.
"""
import jax.numpy as jnp
import numpy as np


def unpack_int4(packed):
  """packed: int32 [..., in/8] -> int8 [..., in] with values in [-8, 7]."""
  packed = jnp.asarray(packed)
  if packed.dtype != jnp.int32:
    raise TypeError(f"unpack_int4: expected int32 packed words, got {packed.dtype}")
  shifts = jnp.arange(8, dtype=jnp.int32) * 4                    # [8]
  nibbles = (packed[..., None] >> shifts) & 0xF                  # [..., in/8, 8]
  q = nibbles.astype(jnp.int8) - 8
  return q.reshape(*packed.shape[:-1], packed.shape[-1] * 8)


def pack_int4(q):
  """q: integer [..., in] in [-8, 7] (in % 8 == 0) -> int32 [..., in/8]. NumPy or JAX input."""
  q = np.asarray(q)
  if q.shape[-1] % 8:
    raise ValueError(f"pack_int4: input dim {q.shape[-1]} is not a multiple of 8")
  if q.min(initial=0) < -8 or q.max(initial=0) > 7:
    raise ValueError("pack_int4: values outside [-8, 7]")
  nib = (q.astype(np.int64) + 8).reshape(*q.shape[:-1], q.shape[-1] // 8, 8)
  words = np.zeros(nib.shape[:-1], dtype=np.uint32)
  for j in range(8):
    words |= (nib[..., j].astype(np.uint32) << np.uint32(4 * j))
  return words.view(np.int32)


def dequantize_int4(packed, scale, *, group_size=32, dtype=jnp.bfloat16):
  """packed: int32 [..., out, in/8]; scale: [..., out, in/group] -> dtype [..., out, in]."""
  q = unpack_int4(packed).astype(jnp.float32)                     # [..., out, in]
  n_in = q.shape[-1]
  if scale.shape[-1] * group_size != n_in:
    raise ValueError(
        f"dequantize_int4: scale has {scale.shape[-1]} groups of {group_size} but the weight has {n_in} inputs")
  s = jnp.repeat(jnp.asarray(scale).astype(jnp.float32), group_size, axis=-1)
  return (q * s).astype(dtype)


def quantize_int4(w, *, group_size=32, scale_dtype=jnp.bfloat16):
  """Symmetric group-wise INT4 quantisation. w: [..., out, in] -> (packed int32 [..., out, in/8], scale [..., out, in/group]).

  scale = max|w| / 7 per group (so q in [-7, 7]; -8 is representable but unused), stored in
  scale_dtype; q is rounded against the stored (rounded) scale so that dequantisation is exact.
  """
  w = np.asarray(w, dtype=np.float32)
  *lead, n_out, n_in = w.shape
  if n_in % group_size:
    raise ValueError(f"quantize_int4: input dim {n_in} is not a multiple of group_size {group_size}")
  g = w.reshape(*lead, n_out, n_in // group_size, group_size)
  amax = np.abs(g).max(axis=-1)
  scale = np.asarray(jnp.asarray(np.maximum(amax / 7.0, 1e-8)).astype(scale_dtype))
  s32 = scale.astype(np.float32)[..., None]
  q = np.clip(np.rint(g / s32), -8, 7).astype(np.int8).reshape(*lead, n_out, n_in)
  return pack_int4(q), scale
