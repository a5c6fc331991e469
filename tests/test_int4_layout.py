import jax.numpy as jnp
import numpy as np
import pytest

from custom_calls.moe_int4.layout import dequantize_int4, pack_int4, quantize_int4, unpack_int4


def test_hand_written_words_follow_compressed_tensors():
  # Column 8w+j lives in bits 4j..4j+3 of word w, stored as q+8 (least significant nibble first).
  word = 0
  values = [-8, -1, 0, 1, 7, 3, -5, 2]
  for j, q in enumerate(values):
    word |= (q + 8) << (4 * j)
  packed = np.array([[np.uint32(word).view(np.int32)]], np.int32)
  assert unpack_int4(packed).tolist() == [values]
  # A known literal: nibbles 8,8,...,8 (all zeros) = 0x88888888; 0x0000000F -> first column 7, rest -8.
  assert unpack_int4(np.array([[np.uint32(0x88888888).view(np.int32)]])).tolist() == [[0] * 8]
  assert unpack_int4(np.array([[0x0000000F]], np.int32)).tolist() == [[7] + [-8] * 7]


def test_group_scales_apply_per_32_columns():
  rng = np.random.default_rng(1)
  q = rng.integers(-8, 8, size=(3, 64))
  scale = np.array([[0.5, 2.0], [1.0, -1.0], [0.25, 4.0]], np.float32)
  w = dequantize_int4(pack_int4(q), jnp.asarray(scale, jnp.bfloat16), dtype=jnp.float32)
  expect = q * np.repeat(scale, 32, axis=1)
  np.testing.assert_array_equal(np.asarray(w), expect)


def test_pack_unpack_roundtrip_and_quantize_error():
  rng = np.random.default_rng(2)
  q = rng.integers(-8, 8, size=(2, 5, 96))
  assert np.array_equal(np.asarray(unpack_int4(pack_int4(q))), q)
  w = rng.normal(size=(4, 16, 64)).astype(np.float32)
  p, s = quantize_int4(w)
  assert p.dtype == np.int32 and p.shape == (4, 16, 8) and s.shape == (4, 16, 2)
  err = np.abs(np.asarray(dequantize_int4(p, s, dtype=jnp.float32)) - w)
  bound = np.repeat(np.abs(w.reshape(4, 16, 2, 32)).max(-1) / 7, 32, axis=-1).reshape(4, 16, 64)
  assert np.all(err <= bound * 0.51 + 1e-6)


def test_bad_inputs():
  with pytest.raises(ValueError, match="multiple of 8"):
    pack_int4(np.zeros((2, 7), np.int8) + 1)
  with pytest.raises(ValueError, match="outside"):
    pack_int4(np.full((1, 8), 9))
  with pytest.raises(TypeError, match="int32"):
    unpack_int4(jnp.zeros((1, 1), jnp.int16))


@pytest.mark.parametrize("in_place", [True, False])
def test_nibble_planes_are_exact_and_match_the_packing(in_place):
  """Plane j of nibbles.nibble_planes is (q - 8 offset removed) * 2**e_j of column 8w + j, exactly, with
  e = PLANE_EXPONENTS (nibble 4 masked in place) or PLANE_EXPONENTS_SHIFTED, and plane_scale undoes it (also for
  column indices past 8, as the gate/up kernels use it)."""
  from custom_calls.moe_int4.layout import unpack_int4
  from custom_calls.moe_int4.nibbles import (MAGIC, PLANE_EXPONENTS, PLANE_EXPONENTS_SHIFTED, nibble_planes,
                                             plane_columns, plane_scale)
  exponents = PLANE_EXPONENTS if in_place else PLANE_EXPONENTS_SHIFTED
  assert exponents[4] == (16 if in_place else 0) and exponents[:4] + exponents[5:] == (0, 4, 8, 12, 4, 8, 12)
  rng = np.random.default_rng(3)
  words = jnp.asarray(rng.integers(-2**31, 2**31, size=(4, 16), dtype=np.int64).astype(np.int32))
  q = np.asarray(unpack_int4(words), np.float32)                                # [4, 128], columns 8w + j
  planes = nibble_planes(words, jnp.int32(MAGIC), in_place)
  for j, plane in enumerate(planes):
    np.testing.assert_array_equal(np.asarray(plane * plane_scale(jnp.int32(j), in_place)), q[:, j::8])
    np.testing.assert_array_equal(np.asarray(plane), q[:, j::8] * 2.0 ** exponents[j])
    np.testing.assert_array_equal(np.asarray(plane_scale(jnp.int32(j + 8 * 5), in_place)), 2.0 ** -exponents[j])
  cols = jnp.arange(128, dtype=jnp.int32)
  np.testing.assert_array_equal(np.asarray(plane_columns(cols, 128)), (np.arange(128) % 8) * 16 + np.arange(128) // 8)
