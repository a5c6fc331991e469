"""custom_calls.dot_accumulate outside the Triton lowering (the lowering itself: test_kernels_lowering.py)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from custom_calls.dot_accumulate import dot_accumulate


@pytest.mark.parametrize("trans_b,dtype,precision", [(False, jnp.bfloat16, None), (True, jnp.float32, lax.Precision.HIGHEST)])
def test_matches_acc_plus_dot(trans_b, dtype, precision):
  rng = np.random.default_rng(0)
  acc = rng.standard_normal((16, 24)).astype(np.float32)
  a = jnp.asarray(rng.standard_normal((16, 32)), dtype)
  b = jnp.asarray(rng.standard_normal((24, 32) if trans_b else (32, 24)), dtype)
  want = acc + np.asarray(a, np.float64) @ (np.asarray(b, np.float64).T if trans_b else np.asarray(b, np.float64))
  for fn in (dot_accumulate, jax.jit(dot_accumulate, static_argnames=("trans_b", "precision"))):
    got = fn(jnp.asarray(acc), a, b, trans_b=trans_b, precision=precision)
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-4)


def test_bad_inputs_are_named():
  acc = jnp.zeros((4, 8), jnp.float32)
  a = jnp.zeros((4, 3), jnp.bfloat16)
  with pytest.raises(ValueError, match="shapes"):
    dot_accumulate(acc, a, jnp.zeros((4, 8), jnp.bfloat16))
  with pytest.raises(TypeError, match="accumulator must be float32"):
    dot_accumulate(acc.astype(jnp.bfloat16), a, jnp.zeros((3, 8), jnp.bfloat16))
  with pytest.raises(ValueError, match="precision"):
    dot_accumulate(acc, a, jnp.zeros((3, 8), jnp.bfloat16), precision=lax.Precision.HIGH)
