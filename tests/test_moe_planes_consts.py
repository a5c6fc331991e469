"""planes_consts.py: the few-token MoE kernels' one int32 input (the activation planes' bits, then constant words)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from custom_calls.moe_int4.nibbles import MAGIC, activation_planes
from custom_calls.moe_int4.planes_consts import (MAGIC_WORD, OFFSET_WORD, const_index, const_rows, const_word,
                                                 load_planes, planes_and_consts)


@pytest.mark.parametrize("num_consts, rows", [(1, 1), (2, 1), (64, 1), (65, 2), (200, 4)])
def test_const_rows(num_consts, rows):
  assert const_rows(num_consts, 64) == rows


@pytest.mark.parametrize("nibble4_in_place", [True, False])
@pytest.mark.parametrize("traced_offset", [False, True])
def test_layout(nibble4_in_place, traced_offset):
  """Rows [0, N): the planes bit for bit; then the words, row-major from row N (here over two rows)."""
  n, d, words = 3, 64, 100
  x = jax.random.normal(jax.random.PRNGKey(7), (n, d), jnp.bfloat16)
  make = lambda off: planes_and_consts(x, off, words, nibble4_in_place)
  xc = np.asarray(jax.jit(make)(jnp.int32(96)) if traced_offset else make(96))
  assert xc.dtype == np.int32 and xc.shape == (n + 2, d)
  planes = np.asarray(activation_planes(x, nibble4_in_place=nibble4_in_place)).reshape(n, d)
  np.testing.assert_array_equal(xc[:n].view(np.float32), planes)
  consts = xc[n:].reshape(-1)
  assert consts[OFFSET_WORD] == 96 and consts[MAGIC_WORD] == MAGIC and not consts[2:].any()   # the counters at 0
  assert const_word(xc, n, OFFSET_WORD) == 96 and const_word(xc, n, MAGIC_WORD) == MAGIC
  # word 70 (the second row's 7th) through an int and through a traced vector of words
  assert tuple(map(int, const_index(n, d, 70))) == (n + 1, 6)
  rows, cols = const_index(n, d, jnp.array([0, 63, 64, 99], jnp.int32))
  assert rows.tolist() == [n, n, n + 1, n + 1] and cols.tolist() == [0, 63, 0, 35]


def test_load_planes_reads_a_row_s_columns():
  n, d = 2, 64
  x = jax.random.normal(jax.random.PRNGKey(8), (n, d), jnp.float32)
  xc = planes_and_consts(x, 0, 2, True)
  planes = np.asarray(activation_planes(x)).reshape(n, d)
  cols = jnp.arange(5, 13, dtype=jnp.int32)
  np.testing.assert_array_equal(np.asarray(load_planes(xc, 1, cols)), planes[1, 5:13])   # an array indexes as a ref
