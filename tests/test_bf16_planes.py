"""bf16_planes.dequant_planes_bf16: the jnp definition against numpy, and (GPU) the inline PTX against it,
bit for bit."""
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from custom_calls.moe_int4.bf16_planes import dequant_planes_bf16


def random_words_and_scales(seed, shape):
  rng = np.random.default_rng(seed)
  words = rng.integers(-2**31, 2**31, size=shape, dtype=np.int64).astype(np.int32)    # every nibble value
  scales = (rng.uniform(0.5, 1.5, size=shape) * 10.0 ** rng.integers(-4, 1, size=shape)).astype(ml_dtypes.bfloat16)
  return words, scales


def numpy_planes(words, scales):
  """(nib_j - 8) * scale in float64, rounded once to bf16."""
  u = words.astype(np.int64) & 0xFFFFFFFF
  return [((((u >> (4 * j)) & 0xF) - 8) * scales.astype(np.float64)).astype(ml_dtypes.bfloat16) for j in range(8)]


def test_definition_matches_numpy():
  words, scales = random_words_and_scales(0, (16, 24))
  got = jax.jit(dequant_planes_bf16)(jnp.asarray(words), jnp.asarray(scales))
  for j, (g, want) in enumerate(zip(got, numpy_planes(words, scales))):
    np.testing.assert_array_equal(np.asarray(g).view(np.uint16), want.view(np.uint16), err_msg=f"plane {j}")


def test_rejects_wrong_dtypes():
  with pytest.raises(TypeError, match="int32 words and bf16 scales"):
    dequant_planes_bf16(jnp.zeros((4, 4), jnp.int32), jnp.ones((4, 4), jnp.float32))


@pytest.mark.gpu
@pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a GPU backend (jax.default_backend() == 'gpu')")
@pytest.mark.parametrize("shape", [(64, 32), (16, 128)])
def test_ptx_matches_definition_bit_for_bit(shape):
  from jax.experimental import pallas as pl
  from jax.experimental.pallas import triton as plgpu

  def kernel(w_ref, s_ref, *out_refs):
    for ref, plane in zip(out_refs, dequant_planes_bf16(w_ref[...], s_ref[...])):
      ref[...] = plane

  words, scales = random_words_and_scales(1, shape)
  call = pl.pallas_call(kernel, out_shape=[jax.ShapeDtypeStruct(shape, jnp.bfloat16)] * 8,
                        compiler_params=plgpu.CompilerParams(num_warps=4, num_stages=1))
  got = jax.jit(call)(jnp.asarray(words), jnp.asarray(scales))
  for j, (g, want) in enumerate(zip(got, numpy_planes(words, scales))):
    np.testing.assert_array_equal(np.asarray(g).view(np.uint16), want.view(np.uint16), err_msg=f"plane {j}")
