"""Load-time layout of the INT4 experts for the Mosaic GPU expert kernels (mosaic_experts.py).

The compressed-tensors words (layout.py: int32 [E, out, in/8], nibble j of word w = column 8w+j holding q + 8)
become XLA's signed int4 arrays [E, out, in] (two nibbles a byte, column 2c in the low nibble of byte c):
flipping bit 3 of every nibble turns q + 8 into q's two's complement, and a bitcast of the int32 words to
int4 keeps the column order. So TMA copies a [64, BK] weight tile as 32 * BK contiguous bytes, and the kernel
converts it with Mosaic's int4 -> bf16 path.

- Gate and up are one array [E, 2I, D] whose rows alternate in blocks of 32: rows [64i, 64i + 32) are gate rows
  [32i, 32i + 32) and rows [64i + 32, 64i + 64) the same up rows. One 64-row program then produces the gate and
  up values of 32 columns of h, so that SiLU(gate) * up needs no other program's output.
- With `wgmma_order`, the columns of every 32-column block are stored in the order that lets the kernel use the
  registers of its 4-bit tile load as the wgmma operand without moving them between threads
  (mosaic_experts.py `_as_wgmma_operand`): stored column 8c + 2j + b holds column 8j + 2c + b (c, j < 4, b < 2).
  On the words this is a transpose of the 4 x 4 bytes of each 4 words (byte c of word j <-> byte j of word c).
- Scales are transposed to [E, in/g, out], so that the scales of one group of a 64-row tile are 64 contiguous
  bf16 (one row-vector load in the kernel). They must be bf16 (Kimi's are): the kernel dequantises in bf16, and
  q * scale rounded to bf16 is then what the reference computes (layout.dequantize_int4).
"""
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

GATE_UP_BLOCK = 32            # rows of gate, then of up, in each 64-row tile of the gate_up array
_FLIP_BIT3 = -0x77777778      # int32 0x88888888: bit 3 of each of the 8 nibbles


class MosaicExperts(NamedTuple):
  gate_up: jax.Array          # int4 [E, 2I, D]: 64-row tile i = gate rows [32i, 32i+32), then up rows [32i, 32i+32)
  gate_up_scale: jax.Array    # bf16 [E, D/g, 2I] (rows as in gate_up)
  down: jax.Array             # int4 [E, D, I]
  down_scale: jax.Array       # bf16 [E, I/g, D]


def signed_int4(packed):
  """compressed-tensors words int32 [..., out, in/8] -> int4 [..., out, in] (q in [-8, 7])."""
  if packed.dtype != jnp.int32:
    raise TypeError(f"signed_int4: expected int32 packed words, got {packed.dtype}")
  nibbles = lax.bitcast_convert_type(packed ^ jnp.int32(_FLIP_BIT3), jnp.int4)     # [..., out, in/8, 8]
  return nibbles.reshape(*packed.shape[:-1], packed.shape[-1] * 8)


def wgmma_column_order(packed):
  """int32 words [..., in/8] -> the same weights with the columns of each 32-column block in wgmma_order.

  The order is its own inverse (it swaps j and c in column 8j + 2c + b)."""
  if packed.shape[-1] % 4:
    raise ValueError(f"wgmma_column_order: {packed.shape[-1] * 8} inputs are not a multiple of 32")
  blocks = lax.bitcast_convert_type(packed.reshape(*packed.shape[:-1], -1, 4), jnp.uint8)   # [..., in/32, 4 j, 4 c]
  return lax.bitcast_convert_type(jnp.swapaxes(blocks, -1, -2), jnp.int32).reshape(packed.shape)


def _interleave_gate_up(gate, up):
  """gate, up: [E, I, ...] -> [E, 2I, ...], rows alternating in blocks of GATE_UP_BLOCK."""
  e, inter = gate.shape[:2]
  rest = gate.shape[2:]
  blocks = lambda a: a.reshape(e, inter // GATE_UP_BLOCK, 1, GATE_UP_BLOCK, *rest)
  return jnp.concatenate([blocks(gate), blocks(up)], axis=2).reshape(e, 2 * inter, *rest)


def to_mosaic_layout(gate_packed, gate_scale, up_packed, up_scale, down_packed, down_scale, *, group_size=32,
                     wgmma_order=False):
  """The stored compressed-tensors arrays (repack.Int4Experts order) -> MosaicExperts. Run once at load.
  wgmma_order: store the columns for the kernels' wgmma_order=True (module docstring)."""
  e, inter, d8 = gate_packed.shape
  d = d8 * 8
  want = {"gate_packed": (gate_packed, (e, inter, d8)), "up_packed": (up_packed, (e, inter, d8)),
          "down_packed": (down_packed, (e, d, inter // 8)),
          "gate_scale": (gate_scale, (e, inter, d // group_size)), "up_scale": (up_scale, (e, inter, d // group_size)),
          "down_scale": (down_scale, (e, d, inter // group_size))}
  for name, (arr, shape) in want.items():
    if tuple(arr.shape) != shape:
      raise ValueError(f"to_mosaic_layout: {name} has shape {tuple(arr.shape)}, expected {shape} "
                       f"(E={e}, I={inter}, D={d}, group_size={group_size})")
    if name.endswith("scale") and arr.dtype != jnp.bfloat16:
      raise TypeError(f"to_mosaic_layout: {name} is {arr.dtype}; the Mosaic expert kernels need bf16 scales")
  if inter % GATE_UP_BLOCK:
    raise ValueError(f"to_mosaic_layout: the intermediate size {inter} is not a multiple of {GATE_UP_BLOCK}")
  order = wgmma_column_order if wgmma_order else (lambda words: words)
  gate_up = _interleave_gate_up(signed_int4(order(gate_packed)), signed_int4(order(up_packed)))
  gate_up_scale = jnp.swapaxes(_interleave_gate_up(gate_scale, up_scale), 1, 2)
  return MosaicExperts(gate_up, gate_up_scale, *down_to_mosaic_layout(down_packed, down_scale,
                                                                      wgmma_order=wgmma_order))


def down_to_mosaic_layout(down_packed, down_scale, *, wgmma_order=False):
  """The stored down words int32 [E, D, I/8] and scales [E, D, I/g] -> (int4 [E, D, I], bf16 [E, I/g, D]): the
  down half of MosaicExperts (also what mosaic_down_prewait.py reads). Run once at load."""
  if down_packed.ndim != 3 or down_scale.ndim != 3 or down_scale.shape[:2] != down_packed.shape[:2]:
    raise ValueError(f"down_to_mosaic_layout: down_packed {tuple(down_packed.shape)} and down_scale "
                     f"{tuple(down_scale.shape)} must be the stored [E, D, I/8] words and [E, D, I/g] scales")
  if down_scale.dtype != jnp.bfloat16:
    raise TypeError(f"down_to_mosaic_layout: down_scale is {down_scale.dtype}; the Mosaic kernels need bf16 scales")
  order = wgmma_column_order if wgmma_order else (lambda words: words)
  return signed_int4(order(down_packed)), jnp.swapaxes(down_scale, 1, 2)


def gate_up_halves(rows):
  """[..., 2I, X] in the gate_up row order -> (gate [..., I, X], up [..., I, X])."""
  *lead, two_i, rest = rows.shape
  blocks = rows.reshape(*lead, two_i // (2 * GATE_UP_BLOCK), 2, GATE_UP_BLOCK, rest)
  gate, up = blocks[..., 0, :, :], blocks[..., 1, :, :]
  return gate.reshape(*lead, two_i // 2, rest), up.reshape(*lead, two_i // 2, rest)
