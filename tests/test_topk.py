"""ddtree_jax.topk.top_k equals jax.lax.top_k, values and indices, ties included."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ddtree_jax.topk import default_chunk, top_k


@pytest.mark.parametrize("shape,k,chunk", [((2, 3, 4096), 32, 256), ((15, 2048), 8, 128), ((1, 15, 4096), 256, 512),
                                           ((4, 1024), 64, 64), ((3, 4096), 5, None), ((7, 96), 4, 32)])
def test_equals_lax_top_k_with_ties(shape, k, chunk):
  key = jax.random.key(sum(shape) + k)
  x = jax.random.normal(key, shape, jnp.float32)
  x = jnp.round(x * 4) / 4            # many ties: the indices must follow lax.top_k's order among equal values
  want_v, want_i = jax.lax.top_k(x, k)
  got_v, got_i = jax.jit(lambda a: top_k(a, k, chunk=chunk))(x)
  np.testing.assert_array_equal(np.asarray(got_v), np.asarray(want_v))
  np.testing.assert_array_equal(np.asarray(got_i), np.asarray(want_i))
  assert got_i.dtype == want_i.dtype


def test_fallbacks_and_bad_k():
  x = jnp.arange(12.0).reshape(2, 6)
  for chunk in (None, 6, 5, 2):        # >= the axis, not dividing it, smaller than k: one stage
    v, i = top_k(x, 3, chunk=chunk)
    np.testing.assert_array_equal(np.asarray(i), [[5, 4, 3], [5, 4, 3]])
  gpu = lambda v, k: default_chunk(v, k, backend="gpu")
  assert gpu(4096, 32) == 512 and gpu(4096, 1024) == 1024 and gpu(512, 8) is None
  assert gpu(163840, 32) == 512 and gpu(4096, 4096) is None and default_chunk(4096, 32, backend="cpu") is None
  with pytest.raises(ValueError, match=r"k = 7 must be in \[1, 6\]"):
    top_k(x, 7)


def test_benchmark_smoke(tmp_path):
  import os
  import sys
  sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
  import topk_forms
  rows = topk_forms.main(["--smoke", "--out", str(tmp_path / "t.json")])
  assert {r["form"] for r in rows} >= {"lax.top_k", "chunk 256"} and all(r["seconds"] > 0 for r in rows)
