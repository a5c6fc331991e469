"""The one-launch split combine (custom_calls/mla_attention/split_combine.py) against its XLA form, interpreted
on the CPU on fresh random partials (empty splits, rows with no visible key, ragged tiles), and its bad inputs.
Its Triton lowering for an H200 is checked in test_kernels_lowering.py."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from custom_calls.mla_attention.pallas_triton import mla_attention_pallas
from custom_calls.mla_attention.split_combine import (MAX_SPLITS, combine_partials, combine_splits,
                                                      combine_splits_pallas, default_blocks)
from tests.kernel_checks import rel_err


def partials(seed, b, ns, m, r, dtype):
  """Random per-split outputs and log-sum-exps; about 30% of the (split, row) pairs empty (-inf), and row 0
  empty in every split (a row with no visible key)."""
  ks = jax.random.split(jax.random.PRNGKey(seed), 3)
  o_part = jax.random.normal(ks[0], (b, ns, m, r), jnp.float32).astype(dtype)
  lse = 4.0 * jax.random.normal(ks[1], (b, ns, m), jnp.float32) + 20.0
  lse = jnp.where(jax.random.uniform(ks[2], (b, ns, m)) < 0.3, -jnp.inf, lse)
  lse = lse.at[:, :, 0].set(-jnp.inf)
  o_part = o_part.at[:, :, 0].set(0)                               # an empty split's output is 0
  return o_part, lse


CASES = [
    # (seed, B, NS, M, R, num_rows, dtype, blocks)
    (1, 1, 128, 64, 512, 64, jnp.bfloat16, {}),                      # 64-head decode (Mosaic: bf16 partials)
    (2, 2, 33, 8, 128, 8, jnp.float32, {}),                          # 8 heads (Triton: f32 partials), odd NS
    (3, 1, 7, 64, 64, 20, jnp.bfloat16, {}),                         # padded rows dropped (num_rows < M)
    (4, 2, 9, 12, 32, 12, jnp.float32, dict(block_rows=8, block_cols=16, splits_per_step=4)),  # ragged tiles
]


@pytest.mark.parametrize("seed,b,ns,m,r,num_rows,dtype,blocks", CASES)
def test_matches_xla_combine(seed, b, ns, m, r, num_rows, dtype, blocks):
  o_part, lse = partials(seed, b, ns, m, r, dtype)
  ref = combine_splits(o_part, lse)[:, :num_rows]                 # f32 [B, num_rows, R]
  out = combine_splits_pallas(o_part, lse, out_dtype=jnp.bfloat16, num_rows=num_rows, interpret=True, **blocks)
  assert out.shape == (b, num_rows, r) and out.dtype == jnp.bfloat16
  assert rel_err(out, ref) < 4e-3                                  # the bf16 rounding of the output
  assert np.all(np.asarray(out[:, 0]) == 0)                        # no visible key in any split: 0
  exact = combine_splits_pallas(o_part, lse, num_rows=num_rows, interpret=True, **blocks)   # f32 output
  assert rel_err(exact, ref) < 1e-5


def test_combine_partials_both_ways_agree():
  o_part, lse = partials(5, 1, 16, 16, 64, jnp.float32)
  a = combine_partials(o_part, lse, combine="pallas", out_dtype=jnp.float32, num_rows=10, interpret=True)
  b = combine_partials(o_part, lse, combine="xla", out_dtype=jnp.float32, num_rows=10)
  assert a.shape == b.shape == (1, 10, 64)
  assert rel_err(a, b) < 1e-5
  with pytest.raises(ValueError, match="unknown combine 'cuda'"):
    combine_partials(o_part, lse, combine="cuda", out_dtype=jnp.float32)
  s = jax.ShapeDtypeStruct
  with pytest.raises(ValueError, match="mla_attention_pallas: unknown combine 'XLA'"):   # even with one split
    mla_attention_pallas(s((1, 1, 8, 64), jnp.float32), s((1, 1, 8, 16), jnp.float32), s((1, 64, 64), jnp.float32),
                         s((1, 64, 16), jnp.float32), s((1,), jnp.int32), s((1, 1, 1), jnp.bool_), scale=0.1,
                         num_splits=1, combine="XLA", interpret=True)


def test_default_blocks_fill_a_wave():
  for b, m, r, ns in ((1, 64, 512, 128), (1, 8, 512, 128), (8, 64, 512, 17), (1, 2056, 512, 2)):
    rows, cols, per_step = default_blocks(b, m, r, ns)
    programs = b * -(-m // rows) * (r // cols)
    assert programs >= 128 and r % cols == 0 and cols >= 16
    assert per_step * rows * cols <= 4096 and per_step <= max(1, 1 << (ns - 1).bit_length())


def test_bad_inputs():
  o_part, lse = partials(6, 1, 4, 8, 64, jnp.float32)
  with pytest.raises(ValueError, match=r"lse \(1, 4, 7\), expected \(1, 4, 8\)"):
    combine_splits_pallas(o_part, lse[:, :, :7], interpret=True)
  with pytest.raises(ValueError, match="num_rows 9 must be in"):
    combine_splits_pallas(o_part, lse, num_rows=9, interpret=True)
  with pytest.raises(ValueError, match="block_cols 48 must be a power of two"):
    combine_splits_pallas(o_part, lse, block_cols=48, interpret=True)
  with pytest.raises(ValueError, match="block_cols 128 must divide the width R = 64"):
    combine_splits_pallas(o_part, lse, block_cols=128, interpret=True)
  many = jnp.zeros((1, MAX_SPLITS + 1, 8), jnp.float32)
  with pytest.raises(ValueError, match=f"{MAX_SPLITS + 1} splits, at most {MAX_SPLITS}"):
    combine_splits_pallas(jnp.zeros((1, MAX_SPLITS + 1, 8, 16)), many, interpret=True)


@pytest.mark.gpu
@pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a GPU backend (jax.default_backend() == 'gpu')")
@pytest.mark.parametrize("b,ns,m,num_rows,dtype", [(1, 128, 64, 64, jnp.bfloat16), (1, 128, 8, 8, jnp.float32),
                                                    (8, 17, 64, 64, jnp.bfloat16), (1, 3, 2112, 2056, jnp.bfloat16)])
def test_gpu_matches_xla_combine(b, ns, m, num_rows, dtype):
  o_part, lse = partials(7 + ns, b, ns, m, 512, dtype)
  out = combine_splits_pallas(o_part, lse, out_dtype=jnp.float32, num_rows=num_rows)
  assert rel_err(out, combine_splits(o_part, lse)[:, :num_rows]) < 1e-5
