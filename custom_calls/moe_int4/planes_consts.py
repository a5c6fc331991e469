"""The few-token MoE kernels' one int32 input: constant words, then the activation planes (pallas_gemv.py,
pallas_gemv_pipelined.py).

The kernels need two small things XLA makes before them: the activation planes (nibbles.activation_planes: x
rearranged and pre-scaled, f32) and an int32 constants array (the expert offset, nibbles.MAGIC as a runtime value,
and in the one-launch kernel the counters it updates in place). As two arrays they were two XLA kernels before
the MoE kernels: in the 1-token dispatch a 0.9-us fusion for the two constant words (`iota * MAGIC`, or the
concatenation of a traced offset) beside the 1.3-us planes fusion (H100, optimised HLO and trace:
benchmarks/RESULTS.md, issue 6 thirty-fourth round; in the one-launch kernel a 1.15-us copy of the constant
counters instead). Here both are one array, made by one concatenation that XLA emits as one kernel:

  [0, C)            the constant words: word OFFSET_WORD the expert offset, MAGIC_WORD nibbles.MAGIC, the rest 0
                    (the one-launch kernel's counters and flags); C = consts_words(words) rounded up to 32 words
                    (128 bytes), so that every plane row starts on a 128-byte line;
  [C + n*D, ...)    row n of the f32 planes [N, D] (plane j of x[n] at columns [j*D/8, (j+1)*D/8)), as their bits.

The kernels index the constants as before (word i at i) and load the planes through load_planes (a bitcast of
the int32 words: no instruction).
"""
import jax.numpy as jnp
from jax import lax

from custom_calls.moe_int4.nibbles import MAGIC, activation_planes

OFFSET_WORD = 0                  # the expert offset (global id of local expert 0)
MAGIC_WORD = 1                   # nibbles.MAGIC, loaded by the kernels (nibbles.nibble_planes wants it in a register)
LINE_WORDS = 32                  # int32 words of a 128-byte line


def planes_base(num_consts: int) -> int:
  """The first word of the planes after num_consts constant words: num_consts rounded up to a 128-byte line."""
  return -(-max(num_consts, 2) // LINE_WORDS) * LINE_WORDS


def planes_and_consts(x, expert_offset, num_consts: int, nibble4_in_place: bool):
  """x: [N, D] -> int32 [planes_base(num_consts) + N * D]: the constant words (expert_offset, MAGIC, zeros), then
  the bits of activation_planes(x, nibble4_in_place=...) reshaped to [N, D], row by row. expert_offset may be
  traced (shard_map): the words are elementwise in it, so XLA fuses them into the concatenation's kernel."""
  n, d = x.shape
  base = planes_base(num_consts)
  w = jnp.arange(base, dtype=jnp.int32)
  consts = jnp.where(w == OFFSET_WORD, jnp.asarray(expert_offset, jnp.int32),
                     jnp.where(w == MAGIC_WORD, jnp.int32(MAGIC), jnp.int32(0)))
  planes = activation_planes(x, nibble4_in_place=nibble4_in_place).reshape(n * d)
  return jnp.concatenate([consts, lax.bitcast_convert_type(planes, jnp.int32)])


def load_planes(ref, base: int, width: int, row, cols):
  """f32 planes of row `row` at columns `cols` (an int32 array of plane columns) from the int32 ref that
  planes_and_consts made (base = planes_base(...), width = D)."""
  return lax.bitcast_convert_type(ref[base + row * width + cols], jnp.float32)
