"""Flash-decoding split combine: the per-split outputs of an MLA kernel -> one output, in XLA or in one launch.

Both MLA kernels (pallas_triton.py, mosaic_gpu.py) cut the visible keys of a sequence into NS splits. Each split
writes its normalised partial output o_s and its natural log-sum-exp lse_s (-inf for an empty split or a row with
no visible key in it, whose o_s is 0). The result is

  o = sum_s w_s o_s / sum_s w_s,   w_s = exp(lse_s - max_s lse_s)          (0 for a row with no visible key)

`combine_splits` is the XLA form (the reference; XLA makes 4-5 kernels of it: the max over splits, the weights,
the weighted sum, the denominator and the divide). `combine_splits_pallas` is one Pallas Triton kernel that does
the same: each program loads the log-sum-exps of all splits for its rows, then streams the partial outputs of
its tile. A short decode (batch 1, <= 32K keys) takes 20-35 us of which only 3-13 us are the cache's bytes,
and the XLA combine was 5 of its 7 kernels. H200 (benchmarks/RESULTS.md, issue 6 eleventh and twelfth
rounds): the dispatch with this kernel is 1.6-3 us faster at 32K in every run, the same at 128K, and at 8K faster
in three runs but 4 us slower in one; alone, on 128 splits of 64 x 512 bf16 partials, it takes ~1.4 us past the
timing harness against ~3.6 for XLA's kernels.

Shapes: o_part [B, NS, M, R] (any float dtype), lse [B, NS, M] f32 -> [B, num_rows, R] (num_rows <= M: the
Mosaic kernel's row padding is dropped without another copy).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from custom_calls.pow2 import is_pow2, next_pow2, pow2_at_most

_NEG_INIT = -1e30   # a row tile's maximum log-sum-exp below this is -inf: no split saw a key
TARGET_PROGRAMS = 132   # about one wave of the H200's SMs
COMBINES = ("pallas", "xla")
MAX_SPLITS = 1024   # the kernel loads the log-sum-exps of all splits at once; more go to XLA (e.g. the Triton
                    # kernel's decode at > 512K keys: one split per 512 keys)


def combine_splits(o_part, lse):
  """XLA reference: o_part [B, NS, M, R], lse [B, NS, M] f32 -> f32 [B, M, R]; rows with no visible key in any
  split give 0."""
  lse_max = jnp.max(lse, axis=1, keepdims=True)                    # [B, 1, M]
  lse_max = jnp.where(jnp.isfinite(lse_max), lse_max, 0.0)
  w = jnp.exp(lse - lse_max)                                      # [B, NS, M]; 0 for empty splits
  den = jnp.sum(w, axis=1)                                        # [B, M]
  return jnp.sum(w[..., None] * o_part.astype(jnp.float32), axis=1) / jnp.where(den > 0, den, 1.0)[..., None]


def default_blocks(batch, num_rows, width, num_splits):
  """(block_rows, block_cols, splits_per_step): tiles small enough for about one wave of programs.

  Columns first (down to 16, so that a row segment is still >= 32 bytes), then rows; a step holds at most
  4096 partial values (32 a thread at 4 warps)."""
  block_cols = min(64, pow2_at_most(width))
  block_rows = min(16, next_pow2(num_rows))
  programs = lambda: batch * pl.cdiv(num_rows, block_rows) * pl.cdiv(width, block_cols)
  while programs() < TARGET_PROGRAMS and block_cols > 16:
    block_cols //= 2
  while programs() < TARGET_PROGRAMS and block_rows > 1:
    block_rows //= 2
  splits_per_step = min(next_pow2(num_splits), max(1, 4096 // (block_rows * block_cols)))
  return block_rows, block_cols, splits_per_step


def _combine_kernel(lse_ref, o_ref, out_ref, *, block_rows, block_cols, splits_per_step, num_rows, num_splits):
  """One program: sequence b, rows [i*BR, (i+1)*BR), columns [c*BC, (c+1)*BC).

  lse_ref [B, NS, M] f32; o_ref [B, NS, M, R]; out_ref [B, num_rows, R].
  Two passes over the splits: the maximum of the log-sum-exps (all splits in one load), then the weighted sum,
  accumulated per split slot ([SP, BR, BC]) and reduced over the slots once at the end, so that no step needs a
  reduction across warps."""
  b = pl.program_id(0)
  i = pl.program_id(1)
  c = pl.program_id(2)
  rows = i * block_rows + jnp.arange(block_rows, dtype=jnp.int32)              # [BR]
  row_ok = rows < num_rows
  row_sl = pl.ds(i * block_rows, block_rows)
  col_sl = pl.ds(c * block_cols, block_cols)
  all_splits = next_pow2(num_splits)                                         # NS rounded up to a power of two
  ok_all = (jnp.arange(all_splits, dtype=jnp.int32) < num_splits)[:, None] & row_ok[None, :]
  # A masked load may reach past NS (as the row tiles reach past M); its start is a traced zero so that the
  # slice is not bounds-checked at trace time like a static one.
  first = b * 0
  lse_all = plgpu.load(lse_ref.at[b, pl.ds(first, all_splits), row_sl], mask=ok_all, other=-jnp.inf)  # [NSp, BR]
  m = jnp.max(lse_all, axis=0)                                                 # [BR]
  m = jnp.where(m > _NEG_INIT, m, 0.0)                                         # no visible key: every w is 0
  split_idx = jnp.arange(splits_per_step, dtype=jnp.int32)                    # [SP]

  def step(k, carry):
    acc, den = carry                                                          # [SP, BR, BC], [SP, BR] f32
    s0 = k * splits_per_step
    ok = ((s0 + split_idx) < num_splits)[:, None] & row_ok[None, :]           # [SP, BR]
    lse = plgpu.load(lse_ref.at[b, pl.ds(s0, splits_per_step), row_sl], mask=ok, other=-jnp.inf)
    part = plgpu.load(o_ref.at[b, pl.ds(s0, splits_per_step), row_sl, col_sl], mask=ok[:, :, None], other=0.)
    w = jnp.exp(lse - m[None, :])                                             # [SP, BR]; 0 where lse = -inf
    return acc + w[:, :, None] * part.astype(jnp.float32), den + w

  init = (jnp.zeros((splits_per_step, block_rows, block_cols), jnp.float32),
          jnp.zeros((splits_per_step, block_rows), jnp.float32))
  acc, den = lax.fori_loop(0, pl.cdiv(num_splits, splits_per_step), step, init)
  acc = jnp.sum(acc, axis=0)                                                  # [BR, BC]
  den = jnp.sum(den, axis=0)                                                  # [BR]
  out = acc / jnp.where(den > 0, den, 1.0)[:, None]                           # 0 where no split saw a key
  plgpu.store(out_ref.at[b, row_sl, col_sl], out.astype(out_ref.dtype), mask=row_ok[:, None])


@functools.partial(jax.jit, static_argnames=("out_dtype", "num_rows", "block_rows", "block_cols",
                                             "splits_per_step", "num_warps", "num_stages", "interpret"))
def combine_splits_pallas(o_part, lse, *, out_dtype=jnp.float32, num_rows=None, block_rows=None, block_cols=None,
                          splits_per_step=None, num_warps=4, num_stages=2, interpret=False):
  """One-launch combine (Pallas Triton; interpret=True runs it on a CPU). o_part [B, NS, M, R], lse [B, NS, M]
  f32 -> [B, num_rows, R] out_dtype (num_rows: the first rows of M, default all). The blocks default to
  default_blocks; block_cols must divide R."""
  bsz, num_splits, m, width = o_part.shape
  if lse.shape != (bsz, num_splits, m):
    raise ValueError(f"combine_splits_pallas: lse {lse.shape}, expected {(bsz, num_splits, m)} for o_part "
                     f"{o_part.shape}")
  num_rows = m if num_rows is None else int(num_rows)
  if not 1 <= num_rows <= m:
    raise ValueError(f"combine_splits_pallas: num_rows {num_rows} must be in [1, {m}]")
  d_rows, d_cols, d_splits = default_blocks(bsz, num_rows, width, num_splits)
  block_rows = block_rows or d_rows
  block_cols = block_cols or d_cols
  splits_per_step = splits_per_step or d_splits
  for name, v in (("block_rows", block_rows), ("block_cols", block_cols), ("splits_per_step", splits_per_step)):
    if not is_pow2(v):
      raise ValueError(f"combine_splits_pallas: {name} {v} must be a power of two")
  if width % block_cols:
    raise ValueError(f"combine_splits_pallas: block_cols {block_cols} must divide the width R = {width}")
  if num_splits > MAX_SPLITS:
    raise ValueError(f"combine_splits_pallas: {num_splits} splits, at most {MAX_SPLITS} (one load of all the "
                     "log-sum-exps of a row tile); combine='xla' takes any number")
  kernel = functools.partial(_combine_kernel, block_rows=block_rows, block_cols=block_cols,
                             splits_per_step=splits_per_step, num_rows=num_rows, num_splits=num_splits)
  return pl.pallas_call(
      kernel,
      grid=(bsz, pl.cdiv(num_rows, block_rows), width // block_cols),
      out_shape=jax.ShapeDtypeStruct((bsz, num_rows, width), jnp.dtype(out_dtype)),
      compiler_params=plgpu.CompilerParams(num_warps=num_warps, num_stages=num_stages),
      interpret=interpret,
      name="mla_split_combine",
  )(lse.astype(jnp.float32), o_part)


def check_combine(where, combine):
  if combine not in COMBINES:
    raise ValueError(f"{where}: unknown combine {combine!r}; expected one of {COMBINES}")


def combine_partials(o_part, lse, *, combine, out_dtype, num_rows=None, interpret=False):
  """The attention kernels' combine step: combine "pallas" (combine_splits_pallas, one launch; XLA above
  MAX_SPLITS splits) or "xla" (combine_splits) -> [B, num_rows, R] out_dtype."""
  check_combine("mla_attention", combine)
  if combine == "pallas" and o_part.shape[1] <= MAX_SPLITS:
    return combine_splits_pallas(o_part, lse, out_dtype=out_dtype, num_rows=num_rows, interpret=interpret)
  num_rows = o_part.shape[2] if num_rows is None else num_rows
  return combine_splits(o_part, lse)[:, :num_rows].astype(out_dtype)
