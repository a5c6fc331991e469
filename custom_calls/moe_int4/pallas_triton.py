"""INT4 grouped MoE (SwiGLU experts) as Pallas kernels with the Triton lowering.

Weights are the compressed-tensors `pack-quantized` words and scales (layout.py: int32 words [E, out, in/8],
nibble j of word w = column 8w+j stored as q+8; scales [E, out, in/group]), either as stored or reordered
k-chunked at load time (k_chunks.py: [E, in/C, out, C/8], so that a [BN, C] tile is one contiguous block; on
the H200 0.89-0.97 of the memory roofline at 16-512 tokens against 0.63-0.90 as stored). They are dequantised in
registers, tile by tile, right before the tensor-core dot. Dequantisation ("planar": one dot per nibble position j,
the activations in the matching planes layout of nibbles.py): for bf16 activations bf16_planes.py's PTX
(two weights per instruction, about 2.9 instructions per weight in the gate/up loop), otherwise
nibbles.py's float32 planes (5.2, counted before nibble 4 was masked in place).

Pipeline (one call):
  1. routing (XLA, tiny; `route`): the (token, k) pairs that hit a local expert are sorted by expert; every
     expert's rows are padded to a multiple of `block_m`, so that each row block belongs to one expert
     ("align block size"). Pairs routed to other devices, and experts without tokens, cost nothing.
  2. `_gate_up_kernel`, grid (row block, I tile): h = silu(x Wg^T) * (x Wu^T) for the block's rows,
     gate and up fused (one program reads the matching gate and up tiles). x rows are gathered in the
     kernel from the token ids; h is written in the padded sorted order.
  3. `_down_kernel`, grid (row block, D tile): y = h Wd^T (fp32).
  4. combine (XLA): out[n] = sum_k w[n, k] * y[pos(n, k)] over local pairs (a gather, no scatter).
Programs of row blocks past the used ones return at once.

Memory-bound at small token counts (each hit expert's INT4 weights are read once per row block);
tensor-core bound at thousands of rows (raise block_m).

The dispatch (custom_calls/moe_int4/__init__.py) runs steps 2 and 3 as one launch (pallas_triton_pipelined.py, the
same tile code: gate_up_block, down_block) up to GROUPED_ONE_LAUNCH_MAX_TOKENS tokens, these two kernels above.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from custom_calls.dot_accumulate import dot_accumulate
from custom_calls.moe_int4.bf16_planes import dequant_group_planes_bf16
from custom_calls.moe_int4.k_chunks import (KERNEL_GROUP_SIZES, check_block_k, check_scales, chunk_inputs,
                                            load_scale_tile, load_word_tile, logical_shape)
from custom_calls.moe_int4.nibbles import MAGIC, activation_planes, nibble_planes, plane_columns, plane_scale

_MAGIC_OFFSET = 8388608.0 + 8.0           # (MAGIC | n) as f32 == 2**23 + n for 0 <= n < 2**23 (nibbles.MAGIC)


def _dequant(words, scales, group_size, dtype):
  """words: int32 [BN, BK/8]; scales: [BN, BK/group] -> dtype [BN, BK] (column 8w+j = nibble j of word w)."""
  bn, bk8 = words.shape
  bk = bk8 * 8
  shifts = jnp.arange(8, dtype=jnp.int32) * 4
  nib = (words[:, :, None] >> shifts[None, None, :]) & 0xF                     # [BN, BK/8, 8]
  # int -> float without a conversion instruction: 2**23 + nib, then subtract 2**23 + 8.
  q = lax.bitcast_convert_type(nib | MAGIC, jnp.float32) - _MAGIC_OFFSET      # exact, in [-8, 7]
  q = q.reshape(bn, bk // group_size, group_size)
  w = q * scales.astype(jnp.float32)[:, :, None]
  return w.reshape(bn, bk).astype(dtype)


def _planar_dot(acc, act, w_ref, s_ref, e, n0, kk, magic, *, block_n, block_k, group_size, precision, exact_bf16):
  """acc + x_chunk @ W_chunk^T without reshapes: one dot per nibble plane j (columns 8w + j).

  act(j) -> [BM, BK/8]: plane j of the chunk's activations (planes layout, nibbles.py; pre-scaled by
  2**-PLANE_EXPONENTS[j] unless exact_bf16); w_ref: int32 [E, N, K/8]; s_ref: [E, N, K/g]; the chunk is columns
  [kk*BK, (kk+1)*BK); magic: nibbles.MAGIC as a runtime scalar.
  exact_bf16 (bf16 activations): the planes come from bf16_planes.py (two weights per instruction, each
  (nib - 8) * scale rounded once to bf16); otherwise nibbles.py's float32 planes times the scale, cast.
  """
  bk8 = block_k // 8
  words = load_word_tile(w_ref, e, n0, block_n, kk * bk8, bk8)                # [BN, BK/8]
  # Column 8w + j lies in group 8w // g for every j (g >= 8): the g/8 adjacent words of a group share one
  # scale. Scales load as a contiguous [BN, BK/g] tile and broadcast through a [BN, BK/g, g/8] view (a
  # per-word gather would give the tile a layout that stores to shared memory one element at a time).
  wpg = group_size // 8
  sc = load_scale_tile(s_ref, e, n0, block_n, kk * (block_k // group_size), block_k // group_size)
  if exact_bf16:
    for j, w in enumerate(dequant_group_planes_bf16(words, sc)):                # [BN, BK/8] bf16
      acc = dot_accumulate(acc, act(j), w, trans_b=True, precision=precision)
    return acc
  sc = sc.astype(jnp.float32)[:, :, None]                                       # [BN, BK/g, 1]
  for j, q in enumerate(nibble_planes(words, magic)):                          # q: (nib - 8) * 2**e, exact
    xj = act(j)                                                                 # [BM, BK/8]
    w = (q.reshape(block_n, bk8 // wpg, wpg) * sc).reshape(block_n, bk8).astype(xj.dtype)
    acc = dot_accumulate(acc, xj, w, trans_b=True, precision=precision)
  return acc


def block_tokens(tok_ref, blk, block_m, num_tokens):
  """Token ids of row block `blk` ([BM] i32, padding rows -> 0) and which rows are real ([BM] bool)."""
  toks = tok_ref[pl.ds(blk * block_m, block_m)]
  tok_ok = toks < num_tokens
  return jnp.where(tok_ok, toks, 0), tok_ok


def load_token_columns(x_ref, toks, tok_ok, cols):
  """x_ref [N, D] rows `toks` [BM], columns `cols` [C] -> [BM, C] (zeros on padding rows)."""
  mask = jnp.broadcast_to(tok_ok[:, None], (toks.shape[0], cols.shape[0]))
  return plgpu.load(x_ref.at[toks[:, None], cols[None, :]], mask=mask, other=0.)


def gate_up_block(magic_ref, bexp_ref, tok_ref, x_ref, gw_ref, gs_ref, uw_ref, us_ref, h_ref, blk, jn, *,
                  block_m, block_n, block_k, group_size, num_tokens, precision, planar, exact_bf16):
  """h rows of row block `blk` (a used one), columns [jn*BN, (jn+1)*BN): silu(x Wg^T) * (x Wu^T).

  magic: [1] i32 (nibbles.MAGIC); bexp: [NB] i32; tok: [P_pad] i32 (num_tokens = pad);
  x: [N, D] (planar: in the planes layout); gw/uw: i32 [E, I, D/8]; gs/us: [E, I, D/g] (or k-chunked);
  h: [P_pad, I] (planar: written in the planes layout, for the planar down kernel)."""
  d = x_ref.shape[1]
  e = bexp_ref[blk]
  toks, tok_ok = block_tokens(tok_ref, blk, block_m, num_tokens)               # [BM]
  cols = jnp.arange(block_k, dtype=jnp.int32)
  n0 = jn * block_n

  d8 = d // 8
  w_idx = jnp.arange(block_k // 8, dtype=jnp.int32)

  def body_planar(kk, carry):
    acc_g, acc_u = carry
    act = lambda j: load_token_columns(x_ref, toks, tok_ok, j * d8 + kk * (block_k // 8) + w_idx)
    kw = dict(block_n=block_n, block_k=block_k, group_size=group_size, precision=precision, exact_bf16=exact_bf16)
    acc_g = _planar_dot(acc_g, act, gw_ref, gs_ref, e, n0, kk, magic_ref[0], **kw)
    acc_u = _planar_dot(acc_u, act, uw_ref, us_ref, e, n0, kk, magic_ref[0], **kw)
    return acc_g, acc_u

  def body(kk, carry):
    acc_g, acc_u = carry
    xb = load_token_columns(x_ref, toks, tok_ok, kk * block_k + cols)               # [BM, BK]
    words = lambda ref: load_word_tile(ref, e, n0, block_n, kk * (block_k // 8), block_k // 8)
    scales = lambda ref: load_scale_tile(ref, e, n0, block_n, kk * (block_k // group_size), block_k // group_size)
    wg = _dequant(words(gw_ref), scales(gs_ref), group_size, xb.dtype)              # [BN, BK]
    acc_g = dot_accumulate(acc_g, xb, wg, trans_b=True, precision=precision)
    wu = _dequant(words(uw_ref), scales(us_ref), group_size, xb.dtype)
    acc_u = dot_accumulate(acc_u, xb, wu, trans_b=True, precision=precision)
    return acc_g, acc_u

  zeros = jnp.zeros((block_m, block_n), jnp.float32)
  acc_g, acc_u = lax.fori_loop(0, d // block_k, body_planar if planar else body, (zeros, zeros))
  h = (acc_g * jax.nn.sigmoid(acc_g) * acc_u).astype(h_ref.dtype)
  if planar:                                   # the planes layout (pre-scaled, exact, unless exact_bf16)
    h_cols = n0 + jnp.arange(block_n, dtype=jnp.int32)
    rows = blk * block_m + jnp.arange(block_m, dtype=jnp.int32)
    if not exact_bf16:
      h = (h.astype(jnp.float32) * plane_scale(h_cols)[None, :]).astype(h_ref.dtype)
    h_ref[rows[:, None], plane_columns(h_cols, h_ref.shape[1])[None, :]] = h
  else:
    h_ref[pl.ds(blk * block_m, block_m), pl.ds(n0, block_n)] = h


def down_block(magic_ref, bexp_ref, h_ref, dw_ref, ds_ref, y_ref, blk, jn, *, block_m, block_n, block_k, group_size,
               precision, planar, exact_bf16, poison=None):
  """y rows of row block `blk` (a used one), columns [jn*BN, (jn+1)*BN): h Wd^T.

  magic: [1] i32; h: [P_pad, I] (planar: planes layout); dw: i32 [E, D, I/8]; ds: [E, D, I/g];
  y: [P_pad, D] f32. dw/ds may be k-chunked. poison: None, or an f32 scalar added to the tile (NaN marks a
  failed wait in the one-launch kernel, pallas_triton_pipelined.py)."""
  inter = h_ref.shape[1]
  e = bexp_ref[blk]
  n0 = jn * block_n

  rows = blk * block_m + jnp.arange(block_m, dtype=jnp.int32)

  i8 = inter // 8
  w_idx = jnp.arange(block_k // 8, dtype=jnp.int32)

  def body_planar(kk, acc):
    act = lambda j: h_ref[rows[:, None], (j * i8 + kk * (block_k // 8) + w_idx)[None, :]]
    return _planar_dot(acc, act, dw_ref, ds_ref, e, n0, kk, magic_ref[0], block_n=block_n, block_k=block_k,
                       group_size=group_size, precision=precision, exact_bf16=exact_bf16)

  def body(kk, acc):
    hb = h_ref[pl.ds(blk * block_m, block_m), pl.ds(kk * block_k, block_k)]        # [BM, BK]
    w = _dequant(load_word_tile(dw_ref, e, n0, block_n, kk * (block_k // 8), block_k // 8),
                 load_scale_tile(ds_ref, e, n0, block_n, kk * (block_k // group_size), block_k // group_size),
                 group_size, hb.dtype)
    return dot_accumulate(acc, hb, w, trans_b=True, precision=precision)

  acc = lax.fori_loop(0, inter // block_k, body_planar if planar else body,
                      jnp.zeros((block_m, block_n), jnp.float32))
  if poison is not None:
    acc = acc + poison
  y_ref[pl.ds(blk * block_m, block_m), pl.ds(n0, block_n)] = acc.astype(y_ref.dtype)


def _gate_up_kernel(magic_ref, bvalid_ref, bexp_ref, tok_ref, x_ref, gw_ref, gs_ref, uw_ref, us_ref, h_ref, **kw):
  """Grid (row block, I tile); bvalid: [NB] i32 (0: an unused block, the program returns). See gate_up_block."""
  blk, jn = pl.program_id(0), pl.program_id(1)

  @pl.when(bvalid_ref[blk] != 0)
  def _():
    gate_up_block(magic_ref, bexp_ref, tok_ref, x_ref, gw_ref, gs_ref, uw_ref, us_ref, h_ref, blk, jn, **kw)


def _down_kernel(magic_ref, bvalid_ref, bexp_ref, h_ref, dw_ref, ds_ref, y_ref, **kw):
  """Grid (row block, D tile); bvalid as in _gate_up_kernel. See down_block."""
  blk, jn = pl.program_id(0), pl.program_id(1)

  @pl.when(bvalid_ref[blk] != 0)
  def _():
    down_block(magic_ref, bexp_ref, h_ref, dw_ref, ds_ref, y_ref, blk, jn, **kw)


# Up to this many (token, k) pairs the routing ranks pairs by comparisons ([P, P] and [P_pad, P] masks, a few
# fusions) instead of an argsort and two scatters: at a few tokens the routing's launches are its cost.
RANK_ROUTE_MAX_PAIRS = 1024


def route(expert_ids, num_local, expert_offset, block_m, by_rank=None):
  """Sort the local (token, k) pairs by expert, padding each expert to a multiple of block_m.

  expert_ids: [N, K] global ids. Returns (row_token [P_pad] (N marks padding), pos [N, K] (row of each
  pair in the padded order), is_local [N, K], block_valid [NB], block_expert [NB]).
  by_rank (None: P <= RANK_ROUTE_MAX_PAIRS): place pairs by counting comparisons instead of argsort +
  scatter; the result is identical (a stable sort by local expert).
  """
  n, k = expert_ids.shape
  p = n * k
  p_pad = pl.cdiv(p + min(num_local, p) * (block_m - 1), block_m) * block_m
  if by_rank is None:
    by_rank = p <= RANK_ROUTE_MAX_PAIRS
  local = expert_ids.astype(jnp.int32) - expert_offset
  is_local = (local >= 0) & (local < num_local)
  key = jnp.where(is_local, local, num_local).reshape(-1)                    # [P]; num_local = elsewhere
  # Counts, prefix sums and the block -> expert lookup as comparisons (one fusion each) rather than
  # bincount / cumsum / searchsorted, which XLA runs as several small kernels (a loop for searchsorted).
  experts = jnp.arange(num_local, dtype=jnp.int32)
  counts = jnp.sum((key[:, None] == experts[None, :]).astype(jnp.int32), axis=0)            # [E]
  padded = pl.cdiv(counts, block_m) * block_m
  upto = (experts[None, :] <= experts[:, None]).astype(jnp.int32)                            # [E, E] e' <= e
  pend = jnp.sum(upto * padded[None, :], axis=1)                                             # inclusive sums
  pstart = pend - padded
  if by_rank:
    pairs = jnp.arange(p, dtype=jnp.int32)
    same_before = (key[None, :] == key[:, None]) & (pairs[None, :] < pairs[:, None])        # [P i, P j]
    rank = jnp.sum(same_before.astype(jnp.int32), axis=1)                                    # among its expert
    dest = jnp.where(key < num_local, pstart[jnp.minimum(key, num_local - 1)] + rank, p_pad)  # [P]
    slot_pair = dest[None, :] == jnp.arange(p_pad, dtype=jnp.int32)[:, None]                # [P_pad, P]
    row_token = jnp.where(jnp.any(slot_pair, axis=1),
                          jnp.sum(jnp.where(slot_pair, pairs[None, :] // k, 0), axis=1), n).astype(jnp.int32)
    pos = jnp.minimum(dest, p_pad - 1).reshape(n, k)
  else:
    start = jnp.sum(upto * counts[None, :], axis=1) - counts
    order = jnp.argsort(key, stable=True)
    skey = key[order]
    ske = jnp.minimum(skey, num_local - 1)
    dest = jnp.where(skey < num_local, pstart[ske] + jnp.arange(p, dtype=jnp.int32) - start[ske], p_pad)
    row_token = jnp.full((p_pad,), n, jnp.int32).at[dest].set((order // k).astype(jnp.int32), mode="drop")
    pos = jnp.zeros((p,), jnp.int32).at[order].set(jnp.minimum(dest, p_pad - 1)).reshape(n, k)
  nb = p_pad // block_m
  bstart = jnp.arange(nb, dtype=jnp.int32) * block_m
  block_valid = (bstart < pend[-1]).astype(jnp.int32)
  # expert of a block = number of experts whose padded range ends at or before the block's start
  block_expert = jnp.minimum(jnp.sum((pend[None, :] <= bstart[:, None]).astype(jnp.int32), axis=1),
                             num_local - 1).astype(jnp.int32)
  return row_token, pos, is_local, block_valid, block_expert


def default_blocks(num_tokens, num_local, k_chunk=None):
  """(block_m, block_n, block_k, num_warps, num_stages, planar, block_n_down), the fastest of the H200 sweeps at
  the K2.6 shard (48 experts, D 7168, I 2048), assuming about one local (token, expert) pair per token (top-8 of 384
  experts over 8 devices). k_chunk: the inputs per chunk of k-chunked expert arrays (see
  _default_blocks_k_chunks), None for the stored layout. block_n_down None: the down kernel's tiles are block_n wide.
  Stored layout, milliseconds (benchmarks/RESULTS.md, issue 6 fifth round; bf16 planes):
    8 tokens: bn32 0.152-0.155, bn64 0.148-0.171     16: bn32 0.246, bn64 0.255
    32: bn64 0.311, bn32 0.388                         64: bn64 0.422-0.440, bn128 0.476-0.481
    128-512: bn128 0.535 / 0.564 / 0.577, bn64 0.558 / 0.579 / 0.599
    1024: bm32 0.724, bm16 bn128 0.979                 2048 / 4096: bm64 bn128 bk128 1.256 / 2.443,
                                                       the former bm128 bn128 bk64 non-planar 2.387 / 2.476.
  Tenth round (one run, queued samples, stored layout): bn128 at 16 / 32 / 64 tokens 0.151 / 0.252 / 0.342 ms
  against bn32 / bn64 / bn64 0.202 / 0.278 / 0.406, so bn128 from 9 tokens on (8 tokens: bn32, not re-timed).
  """
  del num_local
  if k_chunk:
    return _default_blocks_k_chunks(num_tokens, k_chunk)
  if num_tokens <= 8:
    return 16, 32, 256, 4, 3, True, None
  if num_tokens <= 512:
    return 16, 128, 256, 4, 3, True, None
  if num_tokens <= 1024:
    return 32, 64, 256, 4, 3, True, None
  return 64, 128, 128, 4, 3, True, None


def _default_blocks_k_chunks(num_tokens, k_chunk):
  """default_blocks for k-chunked arrays: block_k = 256 (the model's chunk: each tile one contiguous block), or 128
  for chunks that 256 does not divide. H200, issue 6 tenth round (calls 1-2, ms, queued samples; the stored-layout
  default in brackets):
    8 tokens: bn64 0.111, bn128 0.118-0.120 (0.127-0.130)     16: bn128 0.143 (0.201), bn64 0.160
    32: bn128 0.219-0.222 (0.277)                              64: bn128 0.318-0.327 (0.403)
    128: bn128 0.393-0.405 (0.422-0.435)                       512: bn128 0.439-0.451 (0.463-0.469)
    1024: bm32 bn128 0.582 (0.665)                             4096: bm32 bn128 1.800 (2.818)
  Twelfth round (calls 3 and 4, two runs): gate/up tiles of 32 with down tiles of 64 up to 12 tokens (twice or
  four times the gate/up programs of bn64 / bn128 at a few row blocks):
    8 tokens: bn32/64 0.105 / 0.105 against bn64 0.111 / 0.111-0.123   12: 0.125 against bn128 0.132-0.142
    6: 0.098-0.099 (the gemv 0.094, dispatched)                        16: 0.156 against bn128 0.140
  so bn128 from 13 tokens. At 12 tokens bn64 (both kernels) was 3-5 us faster in calls 3 and 5 (within the runs'
  spread); bn16 was 2-3x slower everywhere.
  """
  bk = 256 if k_chunk % 256 == 0 else 128          # a divisor of the chunk (supported() asks for multiples of 128)
  if num_tokens <= 12:
    return 16, 32, bk, 4, 3, True, 64
  if num_tokens <= 512:
    return 16, 128, bk, 4, 3, True, None
  return 32, 128, bk, 4, 3, True, None


def down_tile_width(block_n_down, block_n, default_down, default_n):
  """The down kernel's output columns per program: block_n_down if given; else block_n if the caller gave it (an
  explicit gate/up tile sizes both); else default_blocks' block_n_down, or its block_n where that is None."""
  return block_n_down or block_n or default_down or default_n


def supported(x, gate_packed, down_packed, group_size):
  e, inter, d8 = logical_shape(gate_packed)
  d = d8 * 8
  # k-chunked arrays: the default K step (_default_blocks_k_chunks: 256 or 128 inputs) must divide the chunks
  chunks_ok = all(c is None or c % 128 == 0 for c in (chunk_inputs(gate_packed), chunk_inputs(down_packed)))
  return (x.dtype in (jnp.bfloat16, jnp.float16, jnp.float32) and group_size in KERNEL_GROUP_SIZES
          and d % 256 == 0 and inter % 128 == 0 and logical_shape(down_packed) == (e, d, inter // 8) and chunks_ok)


class GroupedOptions(NamedTuple):
  """The grouped kernels' tile sizes and numerics, resolved from the caller's options and default_blocks."""
  block_m: int
  block_n: int
  block_k: int
  block_n_down: int
  block_k_down: int
  num_warps: int
  num_stages: int
  num_warps_down: int
  num_stages_down: int
  planar: bool
  exact_bf16: bool
  precision: object                              # lax.Precision.HIGHEST for float32 x, else None


def grouped_options(name, x, gate_packed, gate_scale, up_packed, up_scale, down_packed, down_scale, *, group_size,
                    block_m=None, block_n=None, block_k=None, num_warps=None, num_stages=None, block_n_down=None,
                    block_k_down=None, num_warps_down=None, num_stages_down=None, planar=None, exact_bf16=None):
  """Checks the expert arrays against x and resolves the options (see routed_experts_int4_pallas); errors name
  `name`, the caller."""
  n, d = x.shape
  e, inter, _ = logical_shape(gate_packed)
  if logical_shape(gate_packed) != (e, inter, d // 8) or up_packed.shape != gate_packed.shape:
    raise ValueError(f"{name}: gate/up packed {gate_packed.shape}/{up_packed.shape}, "
                     f"expected [E, I, D/8] (or k-chunked [E, D/C, I, C/8]) with D = {d} from x {x.shape}")
  if logical_shape(down_packed) != (e, d, inter // 8):
    raise ValueError(f"{name}: down packed {down_packed.shape}, expected {(e, d, inter // 8)} "
                     "or its k-chunked form")
  check_scales(name, gate_packed, gate_scale, up_scale, down_packed, down_scale, group_size)
  dbm, dbn, dbk, dnw, dns, dplanar, dbn_down = default_blocks(n, e, chunk_inputs(gate_packed))
  if planar is None:
    planar = dplanar if block_k is None and x.dtype != jnp.float16 else False
  if planar and x.dtype == jnp.float16:
    raise ValueError(f"{name}: planar=True needs bf16 or float32 x, got float16 (its activation "
                     "planes, pre-scaled by down to 2**-16, would fall below float16's normal range, and its "
                     "nibble-4 weight planes overflow float16 for group scales above 1/8)")
  block_m = block_m or dbm
  block_n_down = down_tile_width(block_n_down, block_n, dbn_down, dbn)
  block_n = block_n or dbn
  block_k = block_k or dbk
  num_warps = num_warps or dnw
  num_stages = num_stages or dns
  block_k = min(block_k, d)
  block_k_down = min(block_k_down or block_k, inter)
  num_warps_down, num_stages_down = num_warps_down or num_warps, num_stages_down or num_stages
  check_block_k(f"{name} (gate/up)", gate_packed, block_k)
  check_block_k(f"{name} (down)", down_packed, block_k_down, what="block_k_down")
  for dim, size, blk in (("D", d, block_k), ("I", inter, block_k_down), ("I", inter, block_n),
                         ("D", d, block_n_down)):
    if size % blk:
      raise ValueError(f"{name}: {dim} = {size} is not a multiple of block {blk}")
  if planar and (block_k < 128 or group_size < 8 or block_k_down < 128):
    raise ValueError(f"{name}: planar=True needs block_k >= 128 (dots of K = block_k/8 >= 16)")
  if block_k % group_size or block_k % 8 or block_k_down % group_size:
    raise ValueError(f"{name}: block_k {block_k} and block_k_down {block_k_down} must be "
                     f"multiples of group {group_size}")
  precision = lax.Precision.HIGHEST if x.dtype == jnp.float32 else None
  if exact_bf16 is None:
    exact_bf16 = planar and x.dtype == jnp.bfloat16
  if exact_bf16 and not (planar and x.dtype == jnp.bfloat16):
    raise ValueError(f"{name}: exact_bf16 needs planar=True and bf16 x, got planar={planar}, "
                     f"x {x.dtype}")

  return GroupedOptions(block_m, block_n, block_k, block_n_down, block_k_down, num_warps, num_stages, num_warps_down,
                        num_stages_down, planar, exact_bf16, precision)


def gate_up_block_options(o, group_size, num_tokens):
  """gate_up_block's keyword arguments under options o (GroupedOptions)."""
  return dict(block_m=o.block_m, block_n=o.block_n, block_k=o.block_k, group_size=group_size, num_tokens=num_tokens,
              precision=o.precision, planar=o.planar, exact_bf16=o.exact_bf16)


def down_block_options(o, group_size):
  """down_block's keyword arguments under options o (GroupedOptions)."""
  return dict(block_m=o.block_m, block_n=o.block_n_down, block_k=o.block_k_down, group_size=group_size,
              precision=o.precision, planar=o.planar, exact_bf16=o.exact_bf16)


def kernel_activations(x, o):
  """x [N, D] as the gate/up kernel reads it: planar, in the planes layout (nibbles.py), pre-scaled by 2**-e for the
  float32 planes, as is for the bf16 ones; otherwise x itself."""
  n, d = x.shape
  return activation_planes(x, prescaled=not o.exact_bf16).reshape(n, d).astype(x.dtype) if o.planar else x


@functools.partial(jax.jit, static_argnames=("group_size", "block_m", "block_n", "block_k", "num_warps",
                                             "num_stages", "block_n_down", "block_k_down", "num_warps_down",
                                             "num_stages_down", "planar", "exact_bf16", "interpret"))
def routed_experts_int4_pallas(x, expert_ids, expert_weights, gate_packed, gate_scale, up_packed, up_scale,
                               down_packed, down_scale, expert_offset=0, *, group_size=32, block_m=None,
                               block_n=None, block_k=None, num_warps=None, num_stages=None, block_n_down=None,
                               block_k_down=None, num_warps_down=None, num_stages_down=None, planar=None,
                               exact_bf16=None, interpret=False):
  """Same contract as reference.routed_experts_int4_reference (compressed-tensors arrays as stored).

  x: [N, D]; expert_ids: [N, K] int32 global ids; expert_weights: [N, K];
  gate_packed/up_packed: int32 [E, I, D/8]; gate_scale/up_scale: [E, I, D/g];
  down_packed: int32 [E, D, I/8]; down_scale: [E, D, I/g]. expert_offset may be traced (shard_map).
  Words and scales may instead be k-chunked (k_chunks.py; then block_k and block_k_down must divide the chunk).
  Returns [N, D] in x.dtype. Block sizes default by rows per expert (default_blocks); the *_down ones (the
  down kernel's) default to the gate/up kernel's, except block_n_down, which follows default_blocks unless block_n
  is given.
  planar (None: by default_blocks, or False when block_k is given or x is float16) = True: dequantise without
  reshapes (8 dots of K = block_k/8 per chunk, one per nibble position, activations gathered with stride 8);
  planar=False: unpack to [BN, BK/8, 8] and reshape to [BN, BK]. Not for float16 x: its planes would be
  pre-scaled by down to 2**-16 (nibbles.PLANE_EXPONENTS), below float16's normal range, and the nibble-4 weights
  (nib - 8) * 2**16 * scale, cast to float16 for the dot, overflow it for group scales above 1/8.
  exact_bf16 (None: planar and bf16 x): planar planes from bf16_planes.py (bf16x2 PTX) instead of nibbles.py.
  """
  n, d = x.shape
  e, inter, _ = logical_shape(gate_packed)
  o = grouped_options("routed_experts_int4_pallas", x, gate_packed, gate_scale, up_packed, up_scale, down_packed,
                      down_scale, group_size=group_size, block_m=block_m, block_n=block_n, block_k=block_k,
                      num_warps=num_warps, num_stages=num_stages, block_n_down=block_n_down, block_k_down=block_k_down,
                      num_warps_down=num_warps_down, num_stages_down=num_stages_down, planar=planar,
                      exact_bf16=exact_bf16)
  row_token, pos, is_local, block_valid, block_expert = route(expert_ids, e, expert_offset, o.block_m)
  p_pad = row_token.shape[0]
  nb = p_pad // o.block_m
  magic = jnp.full((1,), MAGIC, jnp.int32)
  h = pl.pallas_call(
      functools.partial(_gate_up_kernel, **gate_up_block_options(o, group_size, n)),
      grid=(nb, inter // o.block_n),
      out_shape=jax.ShapeDtypeStruct((p_pad, inter), x.dtype),
      compiler_params=plgpu.CompilerParams(num_warps=o.num_warps, num_stages=o.num_stages), interpret=interpret,
      name="moe_int4_gate_up",
  )(magic, block_valid, block_expert, row_token, kernel_activations(x, o), gate_packed, gate_scale, up_packed,
    up_scale)

  y = pl.pallas_call(
      functools.partial(_down_kernel, **down_block_options(o, group_size)),
      grid=(nb, d // o.block_n_down),
      out_shape=jax.ShapeDtypeStruct((p_pad, d), jnp.float32),
      compiler_params=plgpu.CompilerParams(num_warps=o.num_warps_down, num_stages=o.num_stages_down),
      interpret=interpret, name="moe_int4_down",
  )(magic, block_valid, block_expert, h, down_packed, down_scale)

  return combine(y, pos, is_local, expert_weights, x.dtype)


def combine(y, pos, is_local, expert_weights, dtype):
  """out[n] = sum_k w[n, k] * y[pos[n, k]] over local pairs. y: f32 [P_pad, D]; pos/is_local/weights: [N, K]."""
  # Rows of unused blocks are never written: select (not multiply) so that they cannot leak.
  yk = y[pos]                                                                 # [N, K, D]
  w = expert_weights.astype(jnp.float32)[..., None]
  out = jnp.sum(jnp.where(is_local[..., None], w * yk, 0.0), axis=1)
  return out.astype(dtype)
