"""f16_word_dots: the activation pairs against numpy, the jnp definition against float64 dots, the gemv option
against the float32 reference, and (GPU) the inline PTX against the definition."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from custom_calls.moe_int4.f16_word_dots import X_MAX, activation_pairs, int4_word_dots_f16


def random_words(seed, shape):
  return np.random.default_rng(seed).integers(-2**31, 2**31, size=shape, dtype=np.int64).astype(np.int32)


def nibbles(words):
  """int32 [...] -> int [..., 8]: nibble j of each word."""
  return (words[..., None].astype(np.int64) & 0xFFFFFFFF) >> (4 * np.arange(8)) & 0xF


def halves(bits):
  u = np.asarray(bits).astype(np.int64) & 0xFFFFFFFF
  f = lambda h: h.astype(np.uint16).view(np.float16).astype(np.float64)
  return f(u & 0xFFFF), f(u >> 16)


@pytest.mark.parametrize("peak", [3.0, 5000.0])
def test_activation_pairs_layout_and_token_scale(peak):
  rng = np.random.default_rng(1)
  x = (rng.standard_normal((3, 64)) * peak).astype(np.float32)
  x[1] *= 1e-3                                                  # a token that needs no scaling
  pairs, rescale = jax.jit(activation_pairs)(jnp.asarray(x))
  pairs, rescale = np.asarray(pairs).reshape(3, 4, 8), np.asarray(rescale)      # [n, p, w]
  for t in range(3):
    assert rescale[t] >= 1 and np.log2(rescale[t]) == int(np.log2(rescale[t]))     # a power of two
    assert np.abs(x[t]).max() / rescale[t] <= X_MAX and (rescale[t] == 1 or np.abs(x[t]).max() / rescale[t] > X_MAX / 2)
    for p in range(4):
      lo, hi = halves(pairs[t, p])
      factor = 16.0 if p % 2 else 1.0
      xt = x[t].reshape(8, 8) / rescale[t]                      # [w, j]
      np.testing.assert_array_equal(lo, (xt[:, p] / factor).astype(np.float16).astype(np.float64))
      np.testing.assert_array_equal(hi, (xt[:, p + 4] / factor).astype(np.float16).astype(np.float64))
  assert rescale[1] == 1.0 and (peak < X_MAX) == (rescale[0] == 1.0)


def word_inputs(seed, shape):
  """Random words and one token's activation pairs broadcast over the words' rows: (words, pairs [4], x [W, 8])."""
  words = random_words(seed, shape)
  x = np.random.default_rng(seed + 1).standard_normal((1, shape[-1] * 8)).astype(np.float32) * 4
  pairs, _ = activation_pairs(jnp.asarray(x))
  pairs = np.asarray(pairs).reshape(4, shape[-1])
  return words, [np.broadcast_to(pairs[p], shape) for p in range(4)], x.reshape(shape[-1], 8)


def test_definition_is_the_word_dot_within_fp16_rounding():
  words, pairs, x = word_inputs(2, (16, 24))
  got = np.asarray(jax.jit(int4_word_dots_f16)(jnp.asarray(words), *map(jnp.asarray, pairs)))
  want = ((nibbles(words) - 8) * x.astype(np.float16).astype(np.float64)[None]).sum(-1)    # [16, 24]
  biggest = np.abs((nibbles(words) - 8) * x[None]).max(-1)                                  # per word
  assert np.all(np.abs(got - want) <= 8 * 2.0 ** -11 * biggest)
  assert np.abs(got - want).max() > 0                                                       # fp16 really rounds


def test_rejects_wrong_dtypes():
  with pytest.raises(TypeError, match="int32 words and int32 activation pairs of one shape"):
    int4_word_dots_f16(jnp.zeros((4, 4), jnp.int32), *[jnp.zeros((4, 4), jnp.float32)] * 4)


@pytest.mark.parametrize("n,scale", [(1, 1.0), (3, 4000.0)])
def test_gemv_f16_dots_match_the_reference(n, scale):
  """The gemv's gate/up kernel on half2 word dots, interpreted: within bf16 tolerance of the float32 reference,
  also for activations large enough to need the per-token scale."""
  from test_kernels_moe import make_inputs, reference_f32, rel_err
  from custom_calls.moe_int4.pallas_gemv import routed_experts_int4_gemv
  x, ids, w, experts = make_inputs(71 + n, n, 3, 12, 6, 512, 256, jnp.bfloat16)
  x = (x.astype(jnp.float32) * scale).astype(jnp.bfloat16)
  got = routed_experts_int4_gemv(x, ids, w, *experts, 3, interpret=True, block_k=128, f16_dots=True)
  plain = routed_experts_int4_gemv(x, ids, w, *experts, 3, interpret=True, block_k=128)
  ref = reference_f32(x, ids, w, experts, 3)
  assert rel_err(got, ref) < 1e-2 and rel_err(got, plain) < 1e-2
  assert not np.array_equal(np.asarray(got), np.asarray(plain))       # the option really takes the other route


@pytest.mark.gpu
@pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a GPU backend (jax.default_backend() == 'gpu')")
@pytest.mark.parametrize("shape", [(64, 32), (16, 128)])
def test_ptx_matches_definition(shape):
  """The PTX rounds each FMA once; the definition may round a sum twice: equal to a unit of fp16 of the word's
  largest product, and mostly bit for bit."""
  from jax.experimental import pallas as pl
  from jax.experimental.pallas import triton as plgpu

  def kernel(w_ref, a_ref, b_ref, c_ref, d_ref, out_ref):
    out_ref[...] = int4_word_dots_f16(w_ref[...], a_ref[...], b_ref[...], c_ref[...], d_ref[...])

  words, pairs, x = word_inputs(3, shape)
  args = [jnp.asarray(words)] + [jnp.asarray(np.ascontiguousarray(p)) for p in pairs]
  call = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(shape, jnp.float32),
                        compiler_params=plgpu.CompilerParams(num_warps=4, num_stages=1))
  got = np.asarray(jax.jit(call)(*args))
  want = np.asarray(jax.jit(int4_word_dots_f16)(*args))
  biggest = np.abs((nibbles(words) - 8) * x[None]).max(-1)
  assert np.all(np.abs(got - want) <= 2.0 ** -10 * biggest)
  assert np.mean(got == want) > 0.9
