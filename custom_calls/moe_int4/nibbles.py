"""Nibble planes: how the INT4 kernels dequantise compressed-tensors words in registers.

A word holds 8 nibbles; nibble j (bits 4j..4j+3) is column 8w + j of word w, stored as q + 8. Plane j of a
[rows, words] tile is the float tile of nibble j. Extraction costs one LOP3 and one FADD per weight:
nibble j is masked IN PLACE (j <= 4 from the word, j >= 5 from the word shifted down 16 bits once) and OR-ed
into the mantissa of 2**23, so the float reads 2**23 + nib * 2**e and subtracting 2**23 + 8 * 2**e leaves
(nib - 8) * 2**e exactly, e = PLANE_EXPONENTS[j] (bits 16..19 still fit the 23-bit mantissa; bits 20..23
would not). The 2**e is not shifted back: the activations of plane j are pre-multiplied by 2**-e (exact),
which `activation_planes` does once per call (and the gate/up kernels do when they write h for the down
projection).

Nibble 4 in place (`nibble4_in_place=True`, PLANE_EXPONENTS) or from the shifted word (False,
PLANE_EXPONENTS_SHIFTED): from the shifted word LLVM makes it a bit-field extract plus an OR (SHF + SGXT + LOP3 per
word); in place it is one LOP3 like the others (sm_90 SASS compiled without a GPU, the few-token gate/up K loop:
260 -> 244 instructions at one token, 279 -> 263 at 2-8 tokens, where its registers went from 56 to 60). Timed,
in place is faster at 2-4 tokens and slower at one token, so it is a flag (pallas_gemv's nibble4_in_place, per
kernel; the measured defaults and their numbers are in pallas_gemv.default_nibble4_in_place; the grouped kernels
always mask in place). Every product is the same float32 number either way.

The activation layout that goes with it, "planes": [n, j * (K/8) + w] = x[n, 8w + j] * 2**-e_j (e = plane_exponents()),
so that plane j's activations of a run of words are contiguous.
"""
import jax.numpy as jnp
from jax import lax

MAGIC = 0x4B000000          # float32 bits of 2**23
PLANE_EXPONENTS = (0, 4, 8, 12, 16, 4, 8, 12)           # plane j holds (nib_j - 8) * 2**PLANE_EXPONENTS[j]
PLANE_EXPONENTS_SHIFTED = (0, 4, 8, 12, 0, 4, 8, 12)    # the same with nibble 4 taken from the shifted word


def plane_exponents(nibble4_in_place=True):
  return PLANE_EXPONENTS if nibble4_in_place else PLANE_EXPONENTS_SHIFTED


def nibble_planes(words, magic, nibble4_in_place=True):
  """words: int32 [BN, W] -> [(nib_j - 8) * 2**e_j as float32 [BN, W] for nibbles j = 0..7],
  e_j = plane_exponents(nibble4_in_place)[j].

  `magic` must be MAGIC, passed as a runtime value (loaded from an input): with two immediates,
  mask-then-or compiles to two LOP3s; with the magic in a register it is one (H200 SASS).
  """
  hi = words >> 16
  planes = []
  for j, e in enumerate(plane_exponents(nibble4_in_place)):
    src = words if e == 4 * j else hi              # in place at bits 4j, else at bits 4j - 16 of the shifted word
    bits = (src & (0xF << e)) | magic
    planes.append(lax.bitcast_convert_type(bits, jnp.float32) - (8388608.0 + 8.0 * 2.0 ** e))
  return planes


def plane_scale(j, nibble4_in_place=True):
  """2**-plane_exponents(nibble4_in_place)[j mod 8] for an integer array or JAX/NumPy integer scalar j, exactly:
  built from the float32 exponent bits (a formula, not a table: in a kernel a table lookup is a gather)."""
  e = 4 * (j & 3)                                                     # PLANE_EXPONENTS_SHIFTED[j mod 8]
  if nibble4_in_place:
    e = e + 16 * ((j & 7) == 4)                                       # PLANE_EXPONENTS[j mod 8]
  return lax.bitcast_convert_type(((127 - e) << 23).astype(jnp.int32), jnp.float32)


def activation_planes(x, prescaled=True, nibble4_in_place=True):
  """x: [N, D] -> f32 [N, 8, D/8]: [n, j, w] = x[n, 8w + j] * 2**-plane_exponents(nibble4_in_place)[j] (reshape to
  [N, D] for the planes layout). prescaled=False: without the 2**-e factors, in x.dtype (for bf16_planes.py's exact
  planes)."""
  n, d = x.shape
  if not prescaled:
    return jnp.swapaxes(x.reshape(n, d // 8, 8), 1, 2)
  scale = plane_scale(jnp.arange(8, dtype=jnp.int32), nibble4_in_place)                # [8]
  return jnp.swapaxes(x.astype(jnp.float32).reshape(n, d // 8, 8) * scale, 1, 2)


def plane_columns(cols, k):
  """Column indices n of a K-wide row -> their position in the planes layout (n mod 8) * K/8 + n // 8."""
  return (cols & 7) * (k // 8) + (cols >> 3)
