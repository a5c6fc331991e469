"""The few-token MoE kernels' one int32 input: the activation planes, then constant words (pallas_gemv.py,
pallas_gemv_pipelined.py).

The kernels need two small things XLA makes before them: the activation planes (nibbles.activation_planes: x
rearranged and pre-scaled, f32 [N, D]) and int32 constants (the expert offset, nibbles.MAGIC as a runtime value,
and in the one-launch kernel the counters it updates in place). As two arrays they were two XLA kernels before
the MoE kernels: in the 1-token dispatch a 0.9-us fusion for the two constant words (`iota * MAGIC`, or the
concatenation of a traced offset) beside the 1.3-us planes fusion (H100, optimised HLO and trace:
benchmarks/RESULTS.md, issue 6 thirty-fourth round; in the one-launch kernel a 1.15-us copy of the constant
counters instead). Here both are one int32 array [N + R, D], made by one concatenation: one XLA kernel of
1.3-1.5 us on the GPU, and the call's busy time 0.6-1.0 us shorter at 1-2 tokens and 1.9-2.8 us at 4 (H100,
benchmarks/RESULTS.md, issue 6 thirty-fifth round: 4 tokens k-chunked 49.1-49.4 us against 51.9):

  rows [0, N)       the f32 planes as their bits (row n: plane j of x[n] at columns [j*D/8, (j+1)*D/8));
  rows [N, N + R)   the constant words, word w at (N + w // D, w % D): word OFFSET_WORD the expert offset,
                    MAGIC_WORD nibbles.MAGIC, the rest 0 (the one-launch kernel's counters and flags);
                    R = ceil(words / D).

The kernels load the planes as before, at [row, column] (a bitcast of the int32 words: no instruction), and the
words at const_index. In the sm_90 SASS of the 1-token gate/up kernel the K loop has 4 more instructions than with
two arrays (264 against 260: the activation address recomputed in the loop), with this layout, a flat one or a
float32 array alike: ptxas's register allocation once planes and constants share one pointer; the kernel
took 10.02-10.16 us against 9.97-10.03 (round 35), within the runs' spread.
"""
import jax.numpy as jnp
from jax import lax

from custom_calls.moe_int4.nibbles import MAGIC, activation_planes

OFFSET_WORD = 0                  # the expert offset (global id of local expert 0)
MAGIC_WORD = 1                   # nibbles.MAGIC, loaded by the kernels (nibbles.nibble_planes wants it in a register)


def const_rows(num_consts: int, d: int) -> int:
  """Rows of D words that hold num_consts constant words (at least the offset and MAGIC)."""
  return -(-max(num_consts, 2) // d)


def planes_and_consts(x, expert_offset, num_consts: int, nibble4_in_place: bool):
  """x: [N, D] -> int32 [N + const_rows(num_consts, D), D]: the bits of activation_planes(x, nibble4_in_place=...)
  reshaped to [N, D], then the constant words (expert_offset, MAGIC, zeros). expert_offset may be traced
  (shard_map): the words are elementwise in it, so XLA fuses them into the concatenation's kernel."""
  n, d = x.shape
  rows = const_rows(num_consts, d)
  w = jnp.arange(rows * d, dtype=jnp.int32).reshape(rows, d)
  consts = jnp.where(w == OFFSET_WORD, jnp.asarray(expert_offset, jnp.int32),
                     jnp.where(w == MAGIC_WORD, jnp.int32(MAGIC), jnp.int32(0)))
  planes = activation_planes(x, nibble4_in_place=nibble4_in_place).reshape(n, d)
  return jnp.concatenate([lax.bitcast_convert_type(planes, jnp.int32), consts])


def const_index(num_tokens: int, d: int, word):
  """The [row, column] index of constant word `word` (an int, or an int32 scalar or vector) of the array
  planes_and_consts made for num_tokens tokens of width d."""
  if isinstance(word, int):
    return jnp.int32(num_tokens + word // d), jnp.int32(word % d)
  return num_tokens + word // d, word % d


def const_word(ref, num_tokens: int, word: int):
  """Constant word `word` (an int) of the array (or ref) that planes_and_consts made for num_tokens tokens."""
  return ref[const_index(num_tokens, ref.shape[1], word)]


def load_planes(ref, row, cols):
  """f32 planes of row `row` at columns `cols` from the int32 array (or ref) that planes_and_consts made."""
  return lax.bitcast_convert_type(ref[row, cols], jnp.float32)
