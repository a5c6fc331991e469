"""MLA tree attention as a Pallas kernel with the Triton lowering (sm_90, sm_120; CPU via interpret=True).

Absorbed MLA is MQA with a 576-dim key (c_kv 512 + k_pe 64) and a 512-dim value (c_kv), one latent
cache shared by all heads. The T*H query rows of one sequence (row m = t*H + h) are processed in
blocks of `block_m` rows; keys in blocks of `block_k`. Flash-decoding split-K: the visible key range
[0, cache_len[b] + T) of every sequence is cut into `num_splits` contiguous parts (computed on the
device from the dynamic length, so short contexts in a long buffer still spread over all parts), each
program writes a normalised partial output and its log-sum-exp, and split_combine.py combines them (one more
kernel).

Visibility (as in reference.py): key s is visible to query t of sequence b iff s < cache_len[b], or
0 <= s - cache_len[b] < T and block_mask[b, t, s - cache_len[b]]. Key blocks that lie entirely in the
committed context run without a mask; only the blocks that touch the new block gather the tree mask.

Public function: `mla_attention_pallas(q_lat, q_pe, ckv, kpe, cache_len, block_mask, scale=...)`.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from custom_calls.dependent_launch import launch_dependents
from custom_calls.dot_accumulate import dot_accumulate
from custom_calls.mla_attention.split_combine import check_combine, combine_partials
from custom_calls.pow2 import is_pow2, next_pow2, pow2_at_most

_NEG_INIT = -1e30  # running-max start: finite so that exp(-inf - m) = 0 without inf - inf


def _mla_kernel(cl_ref, q_ref, qpe_ref, ckv_ref, kpe_ref, mask_ref, o_ref, lse_ref, *,
                scale, block_m, block_k, num_heads, num_q, num_rows, num_splits, precision, trigger_dependents,
                interpret):
  """One program: sequence b, rows [i*block_m, (i+1)*block_m), key split j.

  cl_ref [B] i32; q_ref [B, M, R]; qpe_ref [B, M, P]; ckv_ref [B, S, R]; kpe_ref [B, S, P];
  mask_ref [B, T, T] bool (read as bytes: Pallas casts a bool pointer to i8 and back, so XLA runs no convert before
  the launch); o_ref [B, NS, M, R]; lse_ref [B, NS, M] f32.
  trigger_dependents: issue dependent_launch.launch_dependents first (the combine's programs may then be placed
  while this kernel runs).
  """
  b = pl.program_id(0)
  if trigger_dependents:
    b = launch_dependents(b, interpret=interpret)                # before every load: they all depend on b
  i = pl.program_id(1)
  j = pl.program_id(2)
  r = q_ref.shape[-1]
  num_keys = ckv_ref.shape[1]

  rows = i * block_m + jnp.arange(block_m, dtype=jnp.int32)       # [BM]
  row_ok = rows < num_rows
  q = plgpu.load(q_ref.at[b, pl.ds(i * block_m, block_m), :], mask=row_ok[:, None], other=0.)
  qpe = plgpu.load(qpe_ref.at[b, pl.ds(i * block_m, block_m), :], mask=row_ok[:, None], other=0.)
  t_of_row = jnp.minimum(rows // num_heads, num_q - 1)             # [BM] query token of each row

  cache_len = cl_ref[b]
  kv_end = jnp.minimum(cache_len + num_q, num_keys)               # keys past it are never visible
  n_blocks = pl.cdiv(kv_end, block_k)
  per_split = pl.cdiv(n_blocks, num_splits)
  blk_lo = jnp.minimum(j * per_split, n_blocks)
  blk_hi = jnp.minimum(blk_lo + per_split, n_blocks)
  # blocks [blk_lo, blk_mid) lie entirely in the committed context: no mask needed.
  blk_mid = jnp.clip(cache_len // block_k, blk_lo, blk_hi)
  kidx = jnp.arange(block_k, dtype=jnp.int32)

  def step(blk, carry, masked):
    acc, m_i, l_i = carry
    k0 = blk * block_k
    keys = k0 + kidx                                               # [BK]
    if masked:
      key_ok = keys < kv_end
      kc = plgpu.load(ckv_ref.at[b, pl.ds(k0, block_k), :], mask=key_ok[:, None], other=0.)
      kp = plgpu.load(kpe_ref.at[b, pl.ds(k0, block_k), :], mask=key_ok[:, None], other=0.)
    else:
      kc = ckv_ref[b, pl.ds(k0, block_k), :]
      kp = kpe_ref[b, pl.ds(k0, block_k), :]
    s = plgpu.dot(qpe, kp, trans_b=True, precision=precision)        # [BM, BK] f32
    s = dot_accumulate(s, q, kc, trans_b=True, precision=precision)
    s *= scale
    if masked:
      rel = keys - cache_len                                       # [BK]
      in_blk = (rel >= 0) & (rel < num_q) & key_ok
      rel_c = jnp.clip(rel, 0, num_q - 1)
      gather_ok = in_blk[None, :] & row_ok[:, None]
      tree = plgpu.load(mask_ref.at[b, t_of_row[:, None], rel_c[None, :]], mask=gather_ok, other=False)
      vis = (keys < cache_len)[None, :] | (gather_ok & tree)
      s = jnp.where(vis, s, -jnp.inf)
    m_new = jnp.maximum(m_i, jnp.max(s, axis=1))
    alpha = jnp.exp(m_i - m_new)
    p = jnp.exp(s - m_new[:, None])
    l_new = l_i * alpha + jnp.sum(p, axis=1)
    # one dot into the rescaled accumulator (a separate `acc + dot` would hold two [BM, R] fp32 tiles)
    acc = dot_accumulate(acc * alpha[:, None], p.astype(kc.dtype), kc, precision=precision)
    return acc, m_new, l_new

  acc = jnp.zeros((block_m, r), jnp.float32)
  m_i = jnp.full((block_m,), _NEG_INIT, jnp.float32)
  l_i = jnp.zeros((block_m,), jnp.float32)
  carry = lax.fori_loop(blk_lo, blk_mid, functools.partial(step, masked=False), (acc, m_i, l_i))
  acc, m_i, l_i = lax.fori_loop(blk_mid, blk_hi, functools.partial(step, masked=True), carry)

  l_safe = jnp.where(l_i > 0, l_i, 1.0)
  o = acc / l_safe[:, None]
  lse = jnp.where(l_i > 0, m_i + jnp.log(l_safe), -jnp.inf)
  plgpu.store(o_ref.at[b, j, pl.ds(i * block_m, block_m), :], o.astype(o_ref.dtype), mask=row_ok[:, None])
  plgpu.store(lse_ref.at[b, j, pl.ds(i * block_m, block_m)], lse, mask=row_ok)


def is_decode(num_rows, block_m):
  """Whether the launch is decode: one row block of at most 32 rows (a few heads of one token, or a few tree tokens
  at 8 heads), memory-bound, with tiny per-split partial outputs."""
  return num_rows <= block_m <= 32


def default_num_splits(batch, num_rows, num_keys, *, block_m, block_k, num_sms=132):
  """Enough programs for about one wave of the chip, but at least 4 key blocks per split; decode (is_decode) never
  past one wave (num_sms programs), down to one key block per split when the keys are few.

  Decode splits down to one key block when the keys are few (H100, seventeenth round: 1 x 8 heads x 8K 0.014 ms at
  128 splits of one block against 0.021 at 32 of four). When they are many, one wave of programs with
  default_num_stages' 3 stages beats two or more waves of 8-block splits, the default until round 36 (16-row blocks)
  and round 37 (32-row blocks). H100, kernel time (benchmarks/RESULTS.md, issue 6):
  - 16-row blocks, round 36: 1 x 8 heads x 128K 57.3 us at 132 splits against 61.7 at 256; 8 x 8 heads x 32K
    104.5 at 16 splits against 115.6 at 64;
  - 32-row blocks (4 tree tokens at 8 heads), round 37: 1 x 128K 68.5 us at 132 splits against 91.2 at 256
    (2 stages); 8 x 32K 116.3 at 16 splits against 163.1-167.4 at 64 (2 stages) and 157.0-158.0 at 64 (3)."""
  row_blocks = pl.cdiv(num_rows, block_m)
  programs = batch * row_blocks
  if is_decode(num_rows, block_m):
    return int(max(1, min(num_sms // programs, num_keys // block_k)))
  max_splits = max(1, num_keys // (4 * block_k))
  want = pl.cdiv(num_sms, programs) if programs < num_sms else 1
  return int(max(1, min(want, max_splits)))


def default_block_k(batch, num_rows, num_keys, *, block_m, num_sms=132):
  """Keys per inner step: 64, except at decode with 16-row blocks (at most 16 heads x tokens):
  - when 64-key blocks leave the default grid under half a wave (few keys: about 4K or less at batch 1), the
    largest of 32 and 16 that fills half a wave, else 16; more, shorter splits keep more SMs loading. H100, issue 6
    round 37, kernel time at 1 x 1 x 8 heads, two runs: 1K 5.4 / 5.4 us with 16-key blocks against 6.8 / 6.7 with
    64 (32: 6.2); 2K 5.8 / 5.8 with 16 against 7.1 / 7.1 (32: 6.3); 4K (32 fills half a wave) 7.4 with 32
    against 7.5 with 64 and 8.1 with 16; 1 x 2 tokens x 2K 7.1 with 16 against 7.9 (32: 6.8); at 4 x 2K, where 64
    already fills the wave, 64 stays ahead (10.2 against 13.0 with 16);
  - else 32 when 64-key blocks would not get default_num_stages' third stage and 32-key blocks would, i.e. where
    64-key blocks leave each split of the one-wave grid under 3 blocks and 32-key blocks give it at least 3, so
    that the third stage has a block to load ahead (about 13K-25K keys at batch 1). H100, issue 6 rounds 36-37,
    kernel time of 1 x 1 x 8 heads: 16K 13.6 / 14.0 / 13.7 / 13.9 us with 32-key blocks and 3 stages against
    14.9 / 14.7 / 15.0 / 14.8 with 64 and 2; 24K 16.7 against 19.1. Where either size leaves one or two blocks a
    split (8K) 64 stays ahead (10.3 against 11.0 with 32 and 3 stages); at 32K 64-key blocks already give 3 or
    more (20.1-20.2 against 20.2-20.5 with 32).
  32-row decode keeps 64: round 37 (H100, kernel time, 1 x 4 tokens x 8 heads) timed 16K at 23.1 us with 32-key
  blocks and 3 stages against 22.4 with 64 and 2, and 2K at 11.8 with 16-key blocks against 10.6 with 64."""
  if not (is_decode(num_rows, block_m) and block_m <= 16):
    return 64
  def splits(block_k):
    return default_num_splits(batch, num_rows, num_keys, block_m=block_m, block_k=block_k, num_sms=num_sms)
  def stages(block_k):
    return default_num_stages(batch, num_rows, num_keys, block_m=block_m, block_k=block_k,
                              num_splits=splits(block_k), num_sms=num_sms)
  if 2 * batch * splits(64) < num_sms:                               # decode's grid is batch x splits
    return 32 if 2 * batch * splits(32) >= num_sms else 16
  if stages(64) < 3 <= stages(32):
    return 32
  return 64


def default_block_m(num_rows):
  """Query rows (of T*H) per program: 64, or the rows rounded up to a power of two (at least 16)."""
  return 64 if num_rows >= 64 else max(16, next_pow2(num_rows))


def default_num_warps(batch, block_m):
  """Triton warps per program: 8 for 64-row blocks; for 32-row blocks (T x H of 17-32, e.g. a 4-token tree at
  8 heads) 8 up to batch 4, where 4 warps spill (255 registers and 128-168 B of stack against 177 and none, sm_90
  SASS), 4 from batch 5; 4 for 16-row blocks (decode). H100, kernel time, benchmarks/RESULTS.md issue 6:
  - round 35 (2 stages, two waves): 1 x 4 x 8 x 8K 16.1 us with 8 against 19.8 with 4, 1 x 4 x 8 x 32K 33.6
    against 36.9, 1 x 3 x 8 x 32K 32.9 against 36.0; 8 x 4 x 8 x 32K 170.5 against 165.2;
  - round 38 (one wave of 3-stage programs, default_num_stages): 1 x 32K 28.8 against 31.0; 2 x 16K 28.4-28.7
    against 29.1-29.2; 2 x 32K 43.1-43.5 against 44.2-44.7; 2 x 64K 69.2-69.4 against 70.0-70.4; 4 x 16K
    43.0-43.2 against 44.0-44.9; 4 x 32K 68.6-69.6 against 69.2 (a tie); 8 x 16K 67.9-68.4 against 68.1-69.5 (a
    tie); 8 x 32K 121.6 against 119.6."""
  if block_m >= 64 or (block_m == 32 and batch <= 4):
    return 8
  return 4


def default_num_stages(batch, num_rows, num_keys, *, block_m, block_k, num_splits, num_sms=132):
  """Triton pipeline stages: 3 for blocks of at most 32 rows (decode) when the grid is at most one wave, so that
  each SM runs one program alone, and each split walks at least 3 key blocks, so that there is a next block to load
  while the current one is in the dots; else 2. H100, kernel time, 3 stages against 2 at the same splits
  (benchmarks/RESULTS.md, issue 6):
  - 16-row blocks (8 heads), round 36: 1 x 32K (132 splits of ~4 blocks) 20.1-20.2 us against 23.2; 1 x 64K 33.1
    against 35.6; 2 x 32K 33.7 against 35.7; 1 x 2 tokens x 32K 22.3 against 25.2; 1 x 16K (~2 blocks a split)
    14.3 against 14.9;
  - 32-row blocks (4 tokens x 8 heads), round 37: 1 x 32K 28.6 against 34.4 (132 splits); 1 x 64K 42.5 against
    50.7; 2 x 32K 43.6 against 53.9 (66 splits); 8 x 32K 116.3 against 139.0 (16 splits);
  Two waves gain little or nothing from them (16 rows: 1 x 128K at 256 splits 62.4 against 61.6; 8 x 32K at 64
  splits 118.2 against 113.9; 32 rows: 8 x 32K at 64 splits 157.0-158.0 against 163.1-167.4). 64-row blocks do not
  fit 3 stages in shared memory (303 KB requested at 1 x 64 heads); 32-row blocks fit (192.5 KB of dynamic shared
  memory in the sm_90 build at 8 warps, benchmarks/sass_report.py)."""
  num_programs = batch * pl.cdiv(num_rows, block_m) * num_splits           # the kernel's grid
  blocks_per_split = num_keys // (block_k * num_splits)
  if block_m <= 32 and num_programs <= num_sms and blocks_per_split >= 3:
    return 3
  return 2


SHORT_WIDE_DECODE_MAX_KEYS = 4096   # buffer length up to which is_short_wide_decode holds at 65-128 rows
SHORT_WIDE_DECODE_MAX_KEYS_64_ROWS = 12288  # ... and at <= 64 rows in the batch (four 16-row blocks)
SHORT_WIDE_DECODE_MAX_ROWS = 128    # batch x query rows up to which it holds (eight 16-row blocks)


def is_short_wide_decode(batch, num_rows, num_keys):
  """64 query rows a sequence or more (one token at 64 heads, 8 tree tokens at 8 heads), at most 128 in the batch,
  over a buffer of at most SHORT_WIDE_DECODE_MAX_KEYS keys (SHORT_WIDE_DECODE_MAX_KEYS_64_ROWS at 64 rows in the
  batch): the shapes past MOSAIC_MIN_ROWS where 16-row blocks in one wave (short_wide_splits) with bf16 partials
  (default_partial_dtype) beat the Mosaic kernel, so that the "auto" dispatch runs this kernel there and
  launch_params defaults to 16-row blocks. H100, issue 6 rounds 40-43 (benchmarks/RESULTS.md), kernel + combine
  busy time, the Triton launch against the Mosaic kernel:
  - 1 x 1 token x 64 heads: 1K 8.1 us against 11.8; 2K 8.5 against 12.3; 4K 11.8 against 13.9; 8K 15.8 / 15.8
    against 16.0 / 16.1 (round 41), 15.9 / 15.8 against 15.9 / 15.9 (round 42); 10K 17.8 against 17.8 (round 43);
    12K 19.1 against 18.8 (round 42), 19.0 / 19.1 against 18.8 / 19.0 (round 43): the one shape of 64 rows where
    Mosaic leads under the 12K bound, by 0.1-0.3 us (0.5-1.6%) in three runs; a 10K bound for one token would need
    the token count as a third input to this rule for at most 0.3 us, so the bound stays 12K for every 64-row shape;
  - 1 x 2 tokens x 32 heads: 12K 19.4 against 20.2 (round 43);
  - 1 x 8 tokens x 8 heads: 2K 8.3 against 13.6; 4K 11.8 against 14.9; 8K 16.0 / 15.9 against 17.0 / 17.0;
    12K 19.8 / 19.7 against 20.3 / 20.3; 16K 23.1 / 23.0 against 22.8 / 22.6, where Mosaic keeps it (round 41);
  - 1 x 4 tokens x 16 heads: 8K 15.8 / 16.0 against 17.1 / 17.2 (round 41);
  - 2 x 1 x 64 heads: 2K 11.4 against 14.8; 4K 15.6 / 15.5 against 17.1 / 17.0 (16 splits; 32: 12.0 and 16.2);
    8K 22.0 / 21.9 against 22.3 / 22.2, a tie, so 128 rows keep the 4K bound (round 41);
  - 1 x 16 tokens x 8 heads: 2K 10.4 / 10.6 against 14.1 / 14.5 (16 splits; 32: 11.6); 4K 15.4 against 16.4;
    8K 22.7 / 22.7 (32 splits: 22.3 / 22.1) against 20.1 / 20.1, where Mosaic wins (round 41);
  - 128 rows at 1K (1 x 16 x 8 and 2 x 8 x 8): 8.5-8.6 against 13.5 (round 41);
  - 2 x 8 tokens x 8 heads: 2K 11.6 against 14.9.
  At 1 x 64 heads x 16K (float32 partials) Mosaic wins, 21.2 against 22.6. At 1 x 64 heads x 4K, 16 splits (14.8),
  64 splits (14.0), 32-row blocks at 64 splits and 8 warps (14.2) and 16-key blocks at 64 splits (16.6) all lose to
  32 splits of 64-key blocks (11.9-12.3 with float32 partials)."""
  max_keys = SHORT_WIDE_DECODE_MAX_KEYS_64_ROWS if batch * num_rows <= 64 else SHORT_WIDE_DECODE_MAX_KEYS
  return num_rows >= 64 and batch * num_rows <= SHORT_WIDE_DECODE_MAX_ROWS and num_keys <= max_keys


def short_wide_splits(batch, num_rows, num_keys, *, block_m, block_k, num_sms=132):
  """Splits for is_short_wide_decode: the largest power of two that keeps the grid (batch x row blocks x splits)
  within one wave (32 for four 16-row blocks, 16 for eight), capped at one key block a split."""
  programs = batch * pl.cdiv(num_rows, block_m)
  return int(max(1, min(pow2_at_most(max(1, num_sms // programs)), num_keys // block_k)))


def default_partial_dtype(batch, num_rows, num_keys, dtype):
  """The per-split outputs' dtype when partial_dtype is None, for inputs of `dtype`: bfloat16 for bfloat16 inputs at
  is_short_wide_decode, where 32 splits of 64 float32 rows write 4 MB (a 4K cache is 4.7 MB) and bf16 halves that;
  float32 inputs keep float32, so as not to add bf16 rounding to a float32 model; float32 elsewhere (round 35: no
  faster at 8-head decode; round 40: 1 x 8 heads at 16K 13.7 / 13.8 us against 13.3 / 13.9, at 32K 19.6 / 19.8
  against 20.0 / 20.4). H100, issue 6 round 40, 1 x 1 x 64 heads, busy time with bf16 against float32 partials: 1K
  8.1 against 8.4; 2K 8.4-8.5 against 8.9-9.0; 4K 11.4-11.8 against 12.2 (32-key blocks: 11.9 against 12.9);
  1 x 8 x 8: 2K 8.3 against 8.9, 4K 11.8 against 12.4. The relative error is then that of the Mosaic kernel, whose
  default is also bf16 (2.8e-3 against 1.0e-3 at 4K)."""
  bf16 = jnp.dtype(dtype) == jnp.bfloat16 and is_short_wide_decode(batch, num_rows, num_keys)
  return jnp.dtype(jnp.bfloat16 if bf16 else jnp.float32)


def launch_params(batch, num_rows, num_keys, *, block_m=None, block_k=None, num_splits=None, num_warps=None,
                  num_stages=None):
  """The launch's (block_m, block_k, num_splits, num_warps, num_stages): each given value kept (block_k clipped to
  the buffer), each None the default_* choice, except at is_short_wide_decode, where block_m defaults to 16 and,
  with 16-row blocks, num_splits to short_wide_splits; block_k's default is 64 when num_splits is given, since
  default_block_k reasons about the default splits. A block under 16 rows or keys is a ValueError."""
  short_wide = is_short_wide_decode(batch, num_rows, num_keys)
  if block_m is None:
    block_m = 16 if short_wide else default_block_m(num_rows)
  if block_k is None:
    block_k = 64 if num_splits is not None else default_block_k(batch, num_rows, num_keys, block_m=block_m)
  block_k = min(block_k, pow2_at_most(num_keys))                  # a key block never exceeds the buffer
  if block_k < 16 or block_m < 16:
    raise ValueError(f"mla_attention_pallas: block_k {block_k} and block_m {block_m} must be >= 16 "
                     f"(S = {num_keys} keys in the cache buffer)")
  if num_splits is None and short_wide and block_m == 16:
    num_splits = short_wide_splits(batch, num_rows, num_keys, block_m=block_m, block_k=block_k)
  if num_splits is None:
    num_splits = default_num_splits(batch, num_rows, num_keys, block_m=block_m, block_k=block_k)
  if num_warps is None:
    num_warps = default_num_warps(batch, block_m)
  if num_stages is None:
    num_stages = default_num_stages(batch, num_rows, num_keys, block_m=block_m, block_k=block_k,
                                    num_splits=num_splits)
  return block_m, block_k, num_splits, num_warps, num_stages


def _partial_dtype(partial_dtype, default):
  """The per-split outputs' dtype: default (None), float32, bfloat16 or float16; anything else is a ValueError."""
  allowed = (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))
  try:
    dt = jnp.dtype(default if partial_dtype is None else partial_dtype)
  except TypeError:
    dt = None
  if dt not in allowed:
    raise ValueError(f"mla_attention_pallas: partial_dtype {partial_dtype!r} must be float32, bfloat16 or float16")
  return dt


def supported(q_lat, q_pe, ckv, kpe):
  """Shapes the kernel handles (the dispatch falls back to XLA otherwise)."""
  r, p = q_lat.shape[-1], q_pe.shape[-1]
  return (is_pow2(r) and is_pow2(p) and r >= 16 and p >= 16 and ckv.shape[-1] == r and kpe.shape[-1] == p
          and ckv.shape[1] >= 16
          and q_lat.dtype in (jnp.bfloat16, jnp.float16, jnp.float32) and ckv.dtype == q_lat.dtype)


@functools.partial(jax.jit, static_argnames=("scale", "block_m", "block_k", "num_splits", "num_warps",
                                             "num_stages", "combine", "partial_dtype", "trigger_dependents",
                                             "interpret"))
def mla_attention_pallas(q_lat, q_pe, ckv, kpe, cache_len, block_mask, *, scale, block_m=None, block_k=None,
                         num_splits=None, num_warps=None, num_stages=None, combine="pallas", partial_dtype=None,
                         trigger_dependents=False, interpret=False):
  """Absorbed MLA tree attention (same contract as reference.mla_attention_reference).

  q_lat: [B, T, H, R]; q_pe: [B, T, H, P]; ckv: [B, S, R]; kpe: [B, S, P]; cache_len: [B] int32;
  block_mask: [B, T, T] bool. Returns o_lat: [B, T, H, R] in q_lat.dtype.
  block_m: query rows (of T*H) per program; block_k: keys per inner step; num_splits: key splits per
  (sequence, row block) (None: fill the chip); num_warps/num_stages: Triton launch parameters;
  combine: how several splits are combined (split_combine.py), "pallas" (combine_splits_pallas, one kernel) or
  "xla" (combine_splits); partial_dtype: dtype of the per-split outputs when there are several splits (None:
  default_partial_dtype, float32 except for bfloat16 inputs at is_short_wide_decode; bfloat16 halves the bytes the
  kernel writes and the combine reads, at ~1e-3 more relative error, as the Mosaic kernel's default). With one
  split the kernel writes the result in q_lat.dtype.
  trigger_dependents: the kernel issues `griddepcontrol.launch_dependents` as its first instruction
  (custom_calls/dependent_launch.py), so that the next kernel's programs (the split combine's) may be placed on the
  SMs, waiting, while it runs. Same results; on the GPU only (nothing is issued interpreted).
  """
  check_combine("mla_attention_pallas", combine)
  bsz, t, h, r = q_lat.shape
  p = q_pe.shape[-1]
  s_len = ckv.shape[1]
  if ckv.shape != (bsz, s_len, r) or kpe.shape != (bsz, s_len, p) or q_pe.shape != (bsz, t, h, p):
    raise ValueError(f"mla_attention_pallas: inconsistent shapes q_lat {q_lat.shape}, q_pe {q_pe.shape}, "
                     f"ckv {ckv.shape}, kpe {kpe.shape} (expected [B,T,H,R], [B,T,H,P], [B,S,R], [B,S,P])")
  if block_mask.shape != (bsz, t, t):
    raise ValueError(f"mla_attention_pallas: block_mask {block_mask.shape}, expected {(bsz, t, t)}")
  m = t * h
  block_m, block_k, num_splits, num_warps, num_stages = launch_params(
      bsz, m, s_len, block_m=block_m, block_k=block_k, num_splits=num_splits, num_warps=num_warps,
      num_stages=num_stages)
  precision = lax.Precision.HIGHEST if q_lat.dtype == jnp.float32 else None
  part_dtype = _partial_dtype(partial_dtype, default_partial_dtype(bsz, m, s_len, q_lat.dtype))
  if num_splits == 1:
    part_dtype = q_lat.dtype

  kernel = functools.partial(
      _mla_kernel, scale=float(scale), block_m=block_m, block_k=block_k, num_heads=h, num_q=t, num_rows=m,
      num_splits=num_splits, precision=precision, trigger_dependents=bool(trigger_dependents), interpret=interpret)
  grid = (bsz, pl.cdiv(m, block_m), num_splits)
  o_part, lse = pl.pallas_call(
      kernel,
      grid=grid,
      out_shape=[jax.ShapeDtypeStruct((bsz, num_splits, m, r), part_dtype),
                 jax.ShapeDtypeStruct((bsz, num_splits, m), jnp.float32)],
      compiler_params=plgpu.CompilerParams(num_warps=num_warps, num_stages=num_stages),
      interpret=interpret,
      name="mla_tree_attention",
  )(cache_len.astype(jnp.int32), q_lat.reshape(bsz, m, r), q_pe.reshape(bsz, m, p), ckv, kpe,
    block_mask.astype(jnp.bool_))

  if num_splits == 1:
    o = o_part[:, 0]                                               # its normalised output is the result
  else:
    o = combine_partials(o_part, lse, combine=combine, out_dtype=q_lat.dtype, interpret=interpret)
  return o.reshape(bsz, t, h, r).astype(q_lat.dtype)
