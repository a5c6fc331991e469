"""planes_consts.py: the few-token MoE kernels' one int32 input (constant words, then the activation planes' bits)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from custom_calls.moe_int4.nibbles import MAGIC, activation_planes
from custom_calls.moe_int4.planes_consts import (LINE_WORDS, MAGIC_WORD, OFFSET_WORD, load_planes, planes_and_consts,
                                                 planes_base)


@pytest.mark.parametrize("num_consts, base", [(2, 32), (5, 32), (32, 32), (33, 64), (1, 32)])
def test_planes_start_on_a_line_after_the_constants(num_consts, base):
  assert planes_base(num_consts) == base and base % LINE_WORDS == 0


@pytest.mark.parametrize("nibble4_in_place", [True, False])
@pytest.mark.parametrize("traced_offset", [False, True])
def test_layout(nibble4_in_place, traced_offset):
  n, d, words = 3, 64, 40
  x = jax.random.normal(jax.random.PRNGKey(7), (n, d), jnp.bfloat16)
  make = lambda off: planes_and_consts(x, off, words, nibble4_in_place)
  xc = np.asarray(jax.jit(make)(jnp.int32(96)) if traced_offset else make(96))
  base = planes_base(words)
  assert xc.dtype == np.int32 and xc.shape == (base + n * d,)
  assert xc[OFFSET_WORD] == 96 and xc[MAGIC_WORD] == MAGIC and not xc[2:base].any()   # the counters start at 0
  planes = np.asarray(activation_planes(x, nibble4_in_place=nibble4_in_place)).reshape(n, d)
  np.testing.assert_array_equal(xc[base:].view(np.float32).reshape(n, d), planes)    # bit for bit, row by row


def test_load_planes_reads_a_row_s_columns():
  n, d = 2, 64
  x = jax.random.normal(jax.random.PRNGKey(8), (n, d), jnp.float32)
  xc = planes_and_consts(x, 0, 2, True)
  planes = np.asarray(activation_planes(x)).reshape(n, d)
  cols = jnp.arange(5, 13, dtype=jnp.int32)
  got = load_planes(xc, planes_base(2), d, 1, cols)       # a jax array indexes as a ref does
  np.testing.assert_array_equal(np.asarray(got), planes[1, 5:13])
