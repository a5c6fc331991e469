"""INT4 MoE for a few tokens (decode, small draft trees): column-tile programs that loop over the pairs.

At a few (token, expert) pairs per device the step reads each hit expert's INT4 words once (24.8 MB per
K2.6 expert) and does almost no arithmetic per byte, so it must stream at HBM speed, and the
dequantisation must cost fewer instructions than the bytes take to arrive (about 22 weights per cycle
per SM on an H200). In token order this path has no routing sort and no atomics:

- Grid = column tiles only: program j owns output columns [j*BN, (j+1)*BN) of every pair (gate/up: of
  h; down: of the output). It loops over the pairs itself, so the grid is the same at 1 and 64 tokens
  and nothing is launched for pairs routed to other devices. For each local pair it streams its
  expert's [BN, K] word tile and reduces it against the pair's activations on the CUDA cores
  (a GEMV: per weight one LOP3, one FADD, one FFMA per row; the group scale one FFMA per group and row).
  A tensor-core variant of the tile (rows padded to 16 against bf16_planes.py's planes) was measured slower at
  every token count from 1 to 32 on the H200 and removed (benchmarks/RESULTS.md, issue 6 sixth round).
- Weights are dequantised as nibble planes and activations arrive in the matching planes layout
  (nibbles.py): x is rearranged by XLA (`activation_planes`, in one int32 array with the kernels' constant words:
  planes_consts.py); h is written by the gate/up kernel straight in that layout.
- Down: program j walks tokens in order and their top-k pairs, summing weight * y in registers, and
  writes out[token, tile] once: every output element is written exactly once, no zero-fill. Its 8-row tile is
  reduced as two 4-row tiles (`down_row_splits`), whose scale tiles Triton loads in the group sums' layout: no
  layout conversion through shared memory in the K loop (H100: 3.5-7% faster at 1-8 tokens on k-chunked experts).
- `pair_splits` S > 1: a second grid axis splits the pairs (gate/up: the local pairs, compacted first) and
  the tokens (down) S ways, so that S programs share a column tile's pairs instead of one walking them all.
  The default at 4-8 tokens (S = tokens): on the H200 0.070 ms against 0.085 unsplit at 4 tokens. The local
  pairs are compacted by XLA (an order array), or with `rank_in_kernel` by each gate/up program itself. At 2-3
  tokens the default is S = P (= tokens x top_k) with no compaction: one pair a gate/up program, the remote ones
  ending at once (`compact_pairs=False`, default_uncompacted_pairs; H100: 2.4-6.8% faster).
- Where the pairs' count is static, the pair loops are straight-line code (`unroll_pairs`, the default up to
  8 tokens), so that the expert ids are independent loads; with 4 warps (default) this made 1-6 tokens 6-11%
  faster on the H200 (issue 6 fifteenth round).
- Optionally (`sort_pairs`) both kernels visit the local pairs sorted by expert (one XLA argsort), and runs
  of up to `rows_per_run` pairs of one expert share one dequantised tile; the down kernel then adds into a
  zeroed fp32 output with atomics. On the H200 this lost to the grouped tensor-core kernels from 64
  tokens on, so the dispatch uses token order only: these two launches below ONE_LAUNCH_MIN_TOKENS, the same
  programs in one launch (pallas_gemv_pipelined.py) from there up to GEMV_MAX_TOKENS.

Numerics: weights are exact ((nib - 8) * scale in fp32), products and sums fp32; h is rounded to the activation
dtype before the down projection, as in the reference.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from custom_calls.dependent_launch import launch_dependents
from custom_calls.moe_int4.k_chunks import (KERNEL_GROUP_SIZES, block_k_fits, check_block_k, check_scale,
                                            check_scales, load_scale_tile, load_word_tile, logical_shape)
from custom_calls.moe_int4.nibbles import nibble_planes, plane_columns, plane_scale
from custom_calls.moe_int4.planes_consts import MAGIC_WORD, OFFSET_WORD, const_word, load_planes, planes_and_consts
from custom_calls.pow2 import is_pow2, next_pow2


def _tile_gemv(mats, e, act_ref, act_rows, act_ok, num_chunks, magic, *, block_n, block_k, group_size,
               nibble4_in_place, prefetch=0):
  """For each (w_ref, s_ref, n0) in mats and each row r: sum_k act[act_rows[r], k] * W[e, n0 + i, k] -> f32 [BN].

  mats: tiles of BN output rows each, from one matrix or several (gate and up at the same rows; the down
  kernel's halves of one matrix, row_splits), all reduced against the same activation loads.
  w_ref: int32 [E, N, K/8]; s_ref: [E, N, K/g] (or both k-chunked, k_chunks.py); act_ref: f32 [rows, 8 * K/8]
  nibble planes (plane j at columns [j*K/8, (j+1)*K/8)), or int32: planes_consts.py's array (the same planes as
  bits in its first rows); act_rows / act_ok: R scalars (i32 row, bool: row r's result is used; act_rows[0] must be
  a valid row);
  magic: nibbles.MAGIC as a runtime scalar (see nibbles.nibble_planes); nibble4_in_place: the extraction
  (nibbles.py) the activation planes were pre-scaled for.
  Returns [[BN] per row] per mat. Every row shares one dequantisation of the [BN, BK/8] word tile.

  With k-chunked words and block_k above the chunk every tile is [NC, BN, C/8] instead (NC = block_k / C).
  Everything is a [BN, BK/8] tile in one layout: the activations are loaded already broadcast over the BN
  rows (each thread loads the columns of its own words, cache hits), because a [BK/8] vector broadcast in
  registers makes Triton convert layouts through shared memory (a barrier per plane, H200 SASS).
  The scale tile is the exception: Triton loads it in a layout of its own (up to 16 contiguous bytes a thread, as
  many scales as the tile has per thread) and converts it to the layout of the group sums (one sum a thread and
  row at 4 words a thread and groups of 32). Where the tile has more scales than the program has threads (8 rows
  x 32 groups at 4 warps and a K step of 1024: 2 a thread) that conversion goes through shared memory every K
  step (two barriers and an STS/LDS round trip; sm_90 SASS, benchmarks/RESULTS.md, issue 6 twenty-fifth and
  twenty-sixth rounds). At one scale a thread (4 rows: the gate/up tiles, the down kernel's halves with
  down_row_splits 2) the two layouts are the same and the K loop has no barrier.

  prefetch (software pipelining in registers; Triton's pipeliner leaves these loads alone, as they feed no dot):
  0: each K step issues its loads at the top of its own trip and waits for them (one DRAM round trip per step);
  1: step c + 1's words and scales are loaded while step c is reduced (two steps' words in flight);
  2: its activations too (cache hits, but an L2 round trip per step otherwise).
  The last step is peeled, so no step is loaded twice and nothing past K is read.
  """
  bk8 = block_k // 8
  k8 = act_ref.shape[1] // 8
  wpg = group_size // 8                                  # words per scale group
  # k-chunked words with a K step of several chunks: [NC, BN, C/8] tiles (NC contiguous [BN, C/8] pieces, the
  # same access granularity as the stored layout's BN rows); otherwise [BN, BK/8] tiles.
  w0 = mats[0][0]
  cw = w0.shape[3] if w0.ndim == 4 else bk8
  nc = bk8 // cw if w0.ndim == 4 and bk8 > cw else 0
  if nc:
    cols = (jnp.arange(nc, dtype=jnp.int32)[:, None, None] * cw + jnp.arange(cw, dtype=jnp.int32)[None, None, :]
            + jnp.zeros((1, block_n, 1), jnp.int32))                                       # [NC, BN, C/8]
  else:
    cols = jnp.zeros((block_n, 1), jnp.int32) + jnp.arange(bk8, dtype=jnp.int32)[None, :]  # [BN, BK/8]
  # Rows outside the run read row 0's activations instead (finite; unwritten rows of h may not be), so the
  # loads need no mask; the caller discards those rows' results.
  safe_rows = [act_rows[0]] + [jnp.where(ok, row, act_rows[0]) for row, ok in zip(act_rows[1:], act_ok[1:])]

  def tiles(w_ref, s_ref, n0, c):
    """The K step c of one tile: (words, f32 scales), each [NC, BN, .] or [BN, .]."""
    if nc:
      words = w_ref[e, pl.ds(c * nc, nc), pl.ds(n0, block_n), :]
      scale = s_ref[e, pl.ds(c * nc, nc), pl.ds(n0, block_n), :]
    else:
      words = load_word_tile(w_ref, e, n0, block_n, c * bk8, bk8)
      scale = load_scale_tile(s_ref, e, n0, block_n, c * (bk8 // wpg), bk8 // wpg)
    return words, scale.astype(jnp.float32)

  def load_acts(c):
    kw0 = c * bk8
    load = load_planes if act_ref.dtype == jnp.int32 else lambda ref, row, at: ref[row, at]
    return [[load(act_ref, row, cols + (j * k8 + kw0)) for j in range(8)] for row in safe_rows]   # R x 8 x cols

  def load(c):
    """What K step c reads: ([(words, scales) per mat], activations or None)."""
    return [tiles(w_ref, s_ref, n0, c) for w_ref, s_ref, n0 in mats], (load_acts(c) if prefetch >= 2 else None)

  def reduce_step(c, accs, loaded):
    mat_tiles, acts = loaded
    if acts is None:
      acts = load_acts(c)
    out = []
    for (words, scale), acc_rows in zip(mat_tiles, accs):
      planes = nibble_planes(words, magic, nibble4_in_place)
      new_rows = []
      for acc, act in zip(acc_rows, acts):
        part = planes[0] * act[0]
        for j in range(1, 8):
          part += planes[j] * act[j]
        if wpg > 1:                                   # the words of one group are adjacent in a thread
          part = jnp.sum(part.reshape(*part.shape[:-1], part.shape[-1] // wpg, wpg), axis=-1)
        new_rows.append(acc + part * scale)
      out.append(tuple(new_rows))
    return tuple(out)

  zeros = jnp.zeros(cols.shape[:-1] + (cols.shape[-1] // wpg,), jnp.float32)
  accs = tuple(tuple(zeros for _ in act_rows) for _ in mats)
  if prefetch:
    def pipelined(c, carry):
      accs, loaded = carry
      upcoming = load(c + 1)                       # issued before step c's arithmetic waits on its own loads
      return reduce_step(c, accs, loaded), upcoming
    accs, last = lax.fori_loop(0, num_chunks - 1, pipelined, (accs, load(0)))
    accs = reduce_step(num_chunks - 1, accs, last)
  else:
    accs = lax.fori_loop(0, num_chunks, lambda c, accs: reduce_step(c, accs, load(c)), accs)
  if nc:
    return [[jnp.sum(jnp.sum(acc, axis=2), axis=0) for acc in acc_rows] for acc_rows in accs]
  return [[jnp.sum(acc, axis=1) for acc in acc_rows] for acc_rows in accs]


def _run_at(i, count, order_ref, ids_ref, expert_offset, *, rows_per_run, num_local):
  """The run of visiting positions i, i+1, ... (< count, at most rows_per_run) whose pairs share the expert
  of position i. Returns (pairs: R i32 scalars, in_run: R bool scalars (False also when that expert is not
  local), local expert e, run length >= 1). order_ref None: position i is pair i (token order)."""
  last = ids_ref.shape[0] - 1
  pairs = [jnp.minimum(i + r, last) for r in range(rows_per_run)]
  if order_ref is not None:
    pairs = [order_ref[p] for p in pairs]
  e = ids_ref[pairs[0]] - expert_offset
  length = jnp.int32(1)
  run_ok = True
  for r in range(1, rows_per_run):
    run_ok = run_ok & (i + r < count) & (ids_ref[pairs[r]] - expert_offset == e)
    length += run_ok.astype(jnp.int32)
  local = (e >= 0) & (e < num_local)
  return pairs, [local & (r < length) for r in range(rows_per_run)], e, length


RANK_IN_KERNEL_MAX_PAIRS = 128   # rank_in_kernel ranks the pairs with a [P, P] comparison in every program


def _local_ranks(ids_ref, expert_offset, num_local):
  """Every program's own compaction of the local pairs (rank_in_kernel): one vector load of the P expert ids,
  then comparisons. Returns (pair index [PP], local expert [PP], is local [PP], rank among the local pairs in
  token order [PP], number of local pairs (scalar)); PP = P rounded up to a power of two (the rest not local)."""
  p = ids_ref.shape[0]
  idx = jnp.arange(next_pow2(p), dtype=jnp.int32)
  e = ids_ref[jnp.minimum(idx, p - 1)] - expert_offset
  local = (e >= 0) & (e < num_local) & (idx < p)
  before = idx[None, :] < idx[:, None]                                    # [PP q, PP p]: p comes before q
  rank = jnp.sum((before & local[None, :]).astype(jnp.int32), axis=1)
  return idx, e, local, rank, jnp.sum(local.astype(jnp.int32))


def gate_up_rows(xc_ref, gw_ref, gs_ref, uw_ref, us_ref, hp_ref, n0, pairs, in_run, e, *, top_k, num_tokens,
                 block_n, block_k, group_size, h_dtype, prefetch, nibble4_in_place, h_nibble4_in_place,
                 h_planes=True):
  """h[p, n0:n0+BN] = SiLU(x W_gate^T) * (x W_up^T) (rounded to h_dtype) for the run's pairs p (R i32 scalars;
  in_run[r]: pair r belongs to the run; in_run[0]: the run's expert e is local). h_planes: written as f32 in the
  planes layout, pre-scaled for h_nibble4_in_place (the Triton down kernels' activations); else as h_dtype in
  column order (a matrix, for mosaic_down_prewait.py). Refs as in _gate_up_kernel; num_tokens: N of xc."""
  chunks = xc_ref.shape[1] // block_k
  cols = n0 + jnp.arange(block_n, dtype=jnp.int32)
  h_cols = plane_columns(cols, hp_ref.shape[1]) if h_planes else cols

  @pl.when(in_run[0])
  def _():
    magic = const_word(xc_ref, num_tokens, MAGIC_WORD)
    g_rows, u_rows = _tile_gemv(((gw_ref, gs_ref, n0), (uw_ref, us_ref, n0)), e, xc_ref,
                                [p // top_k for p in pairs], in_run, chunks, magic,
                                block_n=block_n, block_k=block_k, group_size=group_size,
                                nibble4_in_place=nibble4_in_place, prefetch=prefetch)       # R x [BN] each
    for p, ok, g, u in zip(pairs, in_run, g_rows, u_rows):
      h = (g * jax.nn.sigmoid(g) * u).astype(h_dtype)                  # rounded as the reference rounds h
      if h_planes:
        h = h.astype(jnp.float32) * plane_scale(cols, h_nibble4_in_place)  # the float32 planes carry the 2**-e
      plgpu.store(hp_ref.at[p, h_cols], h, mask=jnp.broadcast_to(ok, (block_n,)))


def _gate_up_kernel(*refs, visits, top_k, num_local, rows_per_run, block_n, block_k, group_size, h_dtype,
                    pair_splits, prefetch, unroll_pairs, nibble4_in_place, h_nibble4_in_place, trigger_dependents,
                    interpret, h_planes=True):
  """Program (j, s): columns [j*BN, (j+1)*BN) of h for the local pairs at visiting positions s, s + S, ...
  (S = pair_splits; S = 1: every position, a run of same-expert pairs at a time).

  visits: "token_order" (position i is pair i; every pair is visited), "order" (the positions are the order
  array's pairs, the first `count` of them local), or "ranked" (position r is the local pair of rank r in token
  order, which every program works out itself, _local_ranks: no XLA kernels before this one).
  refs: xc, count, order, ids, gw, gs, uw, us, hp; without count and order unless visits == "order".
  xc: int32 [N + 1, D], planes_consts.py's array: the activation planes [N, 8 * D/8] (pre-scaled, as bits), then
  the constant words (the expert offset, MAGIC); count: [1] i32 positions to visit; order: [P] i32 pair at each
  position; ids: [P] i32 global expert id per pair (P = N * top_k, token-major);
  gw/uw: int32 [E, I, D/8]; gs/us: [E, I, D/g]; hp: f32 [P, 8 * I/8] planes, pre-scaled (rows of non-local
  pairs unwritten); with h_planes False, h_dtype [>= P, I] in column order (gate_up_rows).
  nibble4_in_place: the x planes' extraction (nibbles.py); h_nibble4_in_place: the down kernel's, which hp is
  pre-scaled for. trigger_dependents: issue dependent_launch.launch_dependents first (the down kernel's programs
  may then be placed while this kernel runs).
  """
  if visits == "order":
    xc_ref, count_ref, order_ref, ids_ref, gw_ref, gs_ref, uw_ref, us_ref, hp_ref = refs
    count = count_ref[0]
  else:
    xc_ref, ids_ref, gw_ref, gs_ref, uw_ref, us_ref, hp_ref = refs
    count, order_ref = ids_ref.shape[0], None
  j = pl.program_id(0)
  if trigger_dependents:
    j = launch_dependents(j, interpret=interpret)                # before every load: they all depend on j
  n0 = j * block_n
  offset = const_word(xc_ref, ids_ref.shape[0] // top_k, OFFSET_WORD)
  gemv_run = functools.partial(gate_up_rows, xc_ref, gw_ref, gs_ref, uw_ref, us_ref, hp_ref, n0,
                               top_k=top_k, num_tokens=ids_ref.shape[0] // top_k, block_n=block_n, block_k=block_k,
                               group_size=group_size, h_dtype=h_dtype,
                               prefetch=prefetch, nibble4_in_place=nibble4_in_place,
                               h_nibble4_in_place=h_nibble4_in_place, h_planes=h_planes)

  if visits == "ranked":
    idx, local_e, local, rank, count = _local_ranks(ids_ref, offset, num_local)

    def visit_rank(r):
      hit = local & (rank == r)                                   # exactly one pair has rank r < count
      gemv_run([jnp.sum(jnp.where(hit, idx, 0))], [r < count], jnp.sum(jnp.where(hit, local_e, 0)))
      return r + pair_splits

    lax.while_loop(lambda r: r < count, visit_rank, pl.program_id(1))
    return

  def visit(i):
    pairs, in_run, e, length = _run_at(i, count, order_ref, ids_ref, offset, rows_per_run=rows_per_run,
                                       num_local=num_local)
    gemv_run(pairs, in_run, e)
    return i + (length if pair_splits == 1 else pair_splits)      # pair_splits > 1: runs of one pair

  if unroll_pairs:
    # In token order with runs of one pair: every position in straight-line code, so the P expert ids are
    # independent loads issued together instead of one dependent load per trip of the loop.
    for i in range(count):
      visit(jnp.int32(i))
  else:
    lax.while_loop(lambda i: i < count, visit, pl.program_id(1))


def _down_row_tiles(dw_ref, ds_ref, n0, block_n, row_splits):
  """The down kernels' BN output rows from n0 as row_splits tiles for _tile_gemv: (rows per tile, ((dw_ref, ds_ref,
  first row) per tile))."""
  sub_n = block_n // row_splits
  return sub_n, tuple((dw_ref, ds_ref, n0 + i * sub_n) for i in range(row_splits))


def down_token_rows(xc_ref, ids_ref, wts_ref, hp_ref, dw_ref, ds_ref, out_ref, n0, t, *, top_k, num_local,
                    block_n, block_k, group_size, prefetch, unroll_pairs, nibble4_in_place, row_splits, poison=None):
  """out[t, n0:n0+BN] = sum_k w[t, k] * (h[t*K + k] @ W_down[e_tk]^T) over token t's local pairs, summed in
  registers and written once. Refs as in _down_token_kernel; poison: None, or an f32 scalar added to every
  output (NaN flags a failed wait in the pipelined kernel, 0.0 otherwise)."""
  chunks = hp_ref.shape[1] // block_k
  sub_n, tiles = _down_row_tiles(dw_ref, ds_ref, n0, block_n, row_splits)
  offset, magic = (const_word(xc_ref, out_ref.shape[0], w) for w in (OFFSET_WORD, MAGIC_WORD))

  def pair(k, acc):
    p = t * top_k + k
    e = ids_ref[p] - offset

    def add_pair():
      ys = _tile_gemv(tiles, e, hp_ref, [p], [True], chunks, magic, block_n=sub_n, block_k=block_k,
                      group_size=group_size, nibble4_in_place=nibble4_in_place, prefetch=prefetch)
      return tuple(a + wts_ref[p] * y for a, (y,) in zip(acc, ys))          # row_splits x [sub_n]
    return lax.cond((e >= 0) & (e < num_local), add_pair, lambda: acc)

  acc = tuple(jnp.zeros((sub_n,), jnp.float32) for _ in tiles)
  if unroll_pairs:                       # straight-line code (the Triton lowering has no unrolled fori_loop)
    for k in range(top_k):
      acc = pair(k, acc)
  else:
    acc = lax.fori_loop(0, top_k, pair, acc)
  for (_, _, row0), a in zip(tiles, acc):
    if poison is not None:
      a = a + poison
    out_ref[t, pl.ds(row0, sub_n)] = a.astype(out_ref.dtype)


def _down_token_kernel(xc_ref, ids_ref, wts_ref, hp_ref, dw_ref, ds_ref, out_ref, *, top_k, num_local, block_n,
                       block_k, group_size, pair_splits, prefetch, unroll_pairs, nibble4_in_place, row_splits):
  """Program (j, s): out[t, j*BN:(j+1)*BN] = sum_k w[t, k] * (h[t*K + k] @ W_down[e_tk]^T) over local pairs
  for tokens t = s, s + S, ..., summed in registers and written once per token (no zero-fill, no atomics).

  ids/wts: [P] (token-major); hp: [P, 8 * I/8] planes; dw: int32 [E, D, I/8]; ds: [E, D, I/g]; out: [N, D].
  row_splits: the BN rows as this many tiles of BN / row_splits rows (routed_experts_int4_gemv's down_row_splits).
  """
  n0 = pl.program_id(0) * block_n

  def token(t):
    down_token_rows(xc_ref, ids_ref, wts_ref, hp_ref, dw_ref, ds_ref, out_ref, n0, t, top_k=top_k,
                    num_local=num_local, block_n=block_n, block_k=block_k, group_size=group_size, prefetch=prefetch,
                    unroll_pairs=unroll_pairs, nibble4_in_place=nibble4_in_place, row_splits=row_splits)
    return t + pair_splits

  lax.while_loop(lambda t: t < out_ref.shape[0], token, pl.program_id(1))   # tokens s, s + S, ...


def _down_sorted_kernel(xc_ref, count_ref, order_ref, ids_ref, wts_ref, hp_ref, dw_ref, ds_ref, out0_ref, out_ref,
                        *, top_k, num_local, rows_per_run, block_n, block_k, group_size, pair_splits, prefetch,
                        nibble4_in_place, row_splits):
  """Program (j, s): for each run of same-expert pairs (visiting order; positions s, s + S, ... when S > 1),
  atomically add w * (h @ W_down[e]^T) into out[token, j*BN:(j+1)*BN]. out (aliased to out0, zeros): f32 [N, D].
  row_splits: as in _down_token_kernel."""
  del out0_ref
  n0 = pl.program_id(0) * block_n
  chunks = hp_ref.shape[1] // block_k
  count = count_ref[0]
  sub_n, tiles = _down_row_tiles(dw_ref, ds_ref, n0, block_n, row_splits)
  offset, magic = (const_word(xc_ref, out_ref.shape[0], w) for w in (OFFSET_WORD, MAGIC_WORD))

  def visit(i):
    pairs, in_run, e, length = _run_at(i, count, order_ref, ids_ref, offset,
                                       rows_per_run=rows_per_run, num_local=num_local)

    @pl.when(in_run[0])
    def _():
      ys = _tile_gemv(tiles, e, hp_ref, pairs, in_run, chunks, magic, block_n=sub_n, block_k=block_k,
                      group_size=group_size, nibble4_in_place=nibble4_in_place, prefetch=prefetch)
      # One add per row: two rows of a run may belong to the same token (routed twice to one expert).
      # Rows past the run get weight 0 (their y is finite: _tile_gemv reads a valid row for them).
      for (_, _, row0), y_rows in zip(tiles, ys):
        cols = row0 + jnp.arange(sub_n, dtype=jnp.int32)
        for p, ok, y in zip(pairs, in_run, y_rows):
          plgpu.atomic_add(out_ref, (p // top_k, cols), y * jnp.where(ok, wts_ref[p], 0.0))
    return i + (length if pair_splits == 1 else pair_splits)

  lax.while_loop(lambda i: i < count, visit, pl.program_id(1))


def default_gemv_blocks(num_tokens):
  """(block_n gate/up, block_n down, block_k, num_warps, num_stages, sort_pairs, rows_per_run, pair_splits,
  prefetch, unroll_pairs) for the K2.6 shard (D 7168, I 2048): at least ~4 programs per SM at one token
  (2048 / 4 = 512 gate/up tiles).
  Above GEMV_MAX_TOKENS (6) the dispatch runs the grouped kernels (at 64 tokens sorted runs of 2 took 0.98 ms,
  grouped 0.61; at 7-8 tokens the grouped kernels in one launch tie or beat these blocks in one launch, H100, issue 6
  twenty-ninth round). From ONE_LAUNCH_MIN_TOKENS (2 since round 37) these blocks run in one launch
  (pallas_gemv_pipelined.py)."""
  if num_tokens <= 8:
    # H200, k-chunked experts, us (benchmarks/RESULTS.md, issue 6 fifteenth round, calls 3-4): 4 warps with the
    # pairs unrolled against the former 8 warps looped, 1 / 2 / 4 / 6 tokens: 21.1 / 35.6 / 61.8 / 88.8 against
    # 23.8 / 40.0 / 68.6 / 94.6; 4 warps looped 20.9 / 37.8 / 63.7 / 91.1; 2 warps 28.2 / 39.0 / 63.0 / 89.6;
    # gate/up tiles of 8 26.0 / 37.4 / 65.1 / 91.5. The pairs are split num_tokens ways (sixth round: 4 tokens
    # 0.070 ms against 0.085 unsplit). prefetch (twelfth round): 1 at one token (1-3 us faster), 0 above (its
    # registers cost more than the step in flight gains there; call 4: 37.1 / 65.3 / 90.1 with it at 2 / 4 / 6).
    # 8 tokens (two launches; the dispatch now runs these blocks in one launch there): 110.7 us in call 4, 120.6
    # with the former defaults (round 12, call 3). The down tile's 8 rows are reduced as two tiles of 4 (default_down_row_splits).
    return 4, 8, 1024, 4, 2, False, 1, num_tokens, 1 if num_tokens == 1 else 0, True
  return 4, 8, 1024, 4, 2, True, 2, 1, 0, False


def default_uncompacted_pairs(num_tokens):
  """Whether routed_experts_int4_gemv, left to its defaults (compact_pairs and pair_splits None), visits the pairs
  without XLA's compaction, one pair a gate/up program (compact_pairs False, pair_splits P = N * top_k): at 2-3
  tokens. H100, k-chunked 256 experts, us per call, two runs (benchmarks/RESULTS.md, issue 6 twenty-eighth round,
  call 2): 2 tokens 33.5 / 34.1 against 35.9 / 35.0 compacted; 3 tokens 49.3 / 49.6 against 50.8 / 50.9. Without
  compaction but N splits: 42.1 / 41.8 at 2 tokens (slower), 49.0 / 48.2 at 3. One token visits its pairs in one
  program anyway (pair_splits 1: no compaction); from ONE_LAUNCH_MIN_TOKENS the one-launch kernel runs (2 tokens
  too since round 37, so the dispatch no longer uses this; direct calls at 2-3 tokens still get it)."""
  return 2 <= num_tokens <= 3


def default_nibble4_in_place(num_tokens):
  """(gate/up, down): nibble 4 masked in place or taken from the shifted word (nibbles.py). H100 (benchmarks/
  RESULTS.md, issue 6 twenty-second round), stored layout, both kernels one way, two runs each: in place 24.4 us
  against 20.8 at one token, 33.4 against 34.6 at 2 tokens, 58.2 against 60.5 at 4, a tie at 8 (grouped kernels).
  Per kernel at one token (call 3, one sample each): each kernel is slower in place, and k-chunked 31.4 against 21.1.
  k-chunked at 2 and 4 tokens (call 4, two runs each): in place 36.0 / 62.7 against 36.3 / 63.4."""
  return (num_tokens > 1, num_tokens > 1)


def default_down_row_splits(num_tokens, block_n_down):
  """The down kernel's row tiles (routed_experts_int4_gemv's down_row_splits): 2 (two tiles of 4 rows, no layout
  conversion in the K loop) for the default 8-row tile at up to 8 tokens, else 1 (not timed).
  H100, k-chunked experts (chunk 256), us per call, two runs each (benchmarks/RESULTS.md, issue 6 twenty-sixth round,
  calls 1-2), 1 / 2 / 4 / 6 / 8 tokens: 20.0 / 35.0-35.1 / 59.5-60.4 / 82.5-83.0 / 106.5-107.1 against 20.9-21.2 /
  36.4-36.6 / 63.6-63.8 / 89.0-89.1 / 112.1-113.9 with one 8-row tile."""
  return 2 if num_tokens <= 8 and block_n_down == 8 else 1


def tile_blocks(num_tokens, d, inter, block_n, block_n_down, block_k, block_k_down, num_warps, num_stages):
  """The tile sizes of routed_experts_int4_gemv (and pallas_gemv_pipelined) with default_gemv_blocks' defaults filled
  in where None: (block_n, block_n_down, block_k, block_k_down, num_warps, num_stages). The K steps are capped at D
  and I (block_k_down defaults to block_k)."""
  dbn, dbnd, dbk, dnw, dns = default_gemv_blocks(num_tokens)[:5]
  block_k = min(block_k or dbk, d, inter)
  return (block_n or dbn, block_n_down or dbnd, block_k, min(block_k_down or block_k, inter), num_warps or dnw,
          num_stages or dns)


def tile_options(name, num_tokens, block_n_down, nibble4_in_place, down_row_splits, prefetch):
  """The tile options of routed_experts_int4_gemv (and pallas_gemv_pipelined), defaults filled in and checked:
  ((gate/up, down) nibble-4 extraction, down_row_splits, prefetch). Errors begin with `name`."""
  if prefetch is None:
    prefetch = default_gemv_blocks(num_tokens)[8]
  if nibble4_in_place is None:
    nibble4_in_place = default_nibble4_in_place(num_tokens)
  if isinstance(nibble4_in_place, bool):
    nibble4_in_place = (nibble4_in_place, nibble4_in_place)
  if not (isinstance(nibble4_in_place, tuple) and len(nibble4_in_place) == 2
          and all(isinstance(v, bool) for v in nibble4_in_place)):
    raise ValueError(f"{name}: nibble4_in_place {nibble4_in_place!r} must be None, a bool or a (gate/up, down) pair "
                     "of bools")
  if down_row_splits is None:
    down_row_splits = default_down_row_splits(num_tokens, block_n_down)
  if not (isinstance(down_row_splits, int) and not isinstance(down_row_splits, bool) and is_pow2(down_row_splits)
          and block_n_down % down_row_splits == 0):
    raise ValueError(f"{name}: down_row_splits {down_row_splits!r} must be a power of two dividing block_n_down "
                     f"{block_n_down}")
  if prefetch not in (0, 1, 2):
    raise ValueError(f"{name}: prefetch {prefetch!r} must be 0, 1 or 2")
  return nibble4_in_place, down_row_splits, prefetch


def supported(x, gate_packed, down_packed, group_size, block_k=1024):
  e, inter, d8 = logical_shape(gate_packed)
  d = d8 * 8
  bk = min(block_k, d, inter)
  return (x.dtype in (jnp.bfloat16, jnp.float16, jnp.float32) and group_size in KERNEL_GROUP_SIZES
          and bk >= 128 and d % bk == 0 and inter % bk == 0 and inter % 64 == 0 and d % 64 == 0
          and logical_shape(down_packed) == (e, d, inter // 8)
          and all(block_k_fits(p, bk, multiples=True) for p in (gate_packed, down_packed)))


def check_experts(name, x, gate_packed, gate_scale, up_packed, up_scale, down_packed, down_scale, group_size, block_k,
                  block_k_down):
  """The checks of routed_experts_int4_gemv (and pallas_gemv_pipelined) on the arrays and the K steps: raises
  ValueError naming `name` and what was expected."""
  if not supported(x, gate_packed, down_packed, group_size, block_k):
    raise ValueError(f"{name}: unsupported shapes x {x.shape} {x.dtype}, gate_packed {gate_packed.shape}, down_packed "
                     f"{down_packed.shape}, group {group_size}, block_k {block_k} (need D and I multiples of block_k "
                     ">= 128 and of 64)")
  if up_packed.shape != gate_packed.shape:
    raise ValueError(f"{name}: up_packed {tuple(up_packed.shape)} and gate_packed {tuple(gate_packed.shape)} must "
                     "have one shape (one layout)")
  check_scales(name, gate_packed, gate_scale, up_scale, down_packed, down_scale, group_size)
  check_block_k(f"{name} (gate/up)", gate_packed, block_k, multiples=True)
  inter = logical_shape(gate_packed)[1]
  if inter % block_k_down or block_k_down < 128 or not is_pow2(block_k_down):
    raise ValueError(f"{name}: block_k_down {block_k_down} must be a power of two >= 128 dividing I = {inter}")
  check_block_k(f"{name} (down)", down_packed, block_k_down, multiples=True)


@functools.partial(jax.jit, static_argnames=("group_size", "block_n", "block_n_down", "block_k", "num_warps",
                                             "num_stages", "sort_pairs", "rows_per_run", "pair_splits",
                                             "prefetch", "unroll_pairs", "block_k_down", "num_warps_down",
                                             "rank_in_kernel", "compact_pairs", "nibble4_in_place", "down_row_splits",
                                             "trigger_dependents", "interpret"))
def routed_experts_int4_gemv(x, expert_ids, expert_weights, gate_packed, gate_scale, up_packed, up_scale,
                             down_packed, down_scale, expert_offset=0, *, group_size=32, block_n=None,
                             block_n_down=None, block_k=None, num_warps=None, num_stages=None, sort_pairs=None,
                             rows_per_run=None, pair_splits=None, prefetch=None, unroll_pairs=None,
                             block_k_down=None, num_warps_down=None, rank_in_kernel=False, compact_pairs=None,
                             nibble4_in_place=None, down_row_splits=None, trigger_dependents=False,
                             interpret=False):
  """Same contract as reference.routed_experts_int4_reference (compressed-tensors arrays as stored).

  x: [N, D]; expert_ids: [N, K] int32 global ids; expert_weights: [N, K];
  gate_packed/up_packed: int32 [E, I, D/8]; gate_scale/up_scale: [E, I, D/g];
  down_packed: int32 [E, D, I/8]; down_scale: [E, D, I/g]. expert_offset may be traced (shard_map).
  Words and scales may instead be k-chunked (k_chunks.py; block_k a divisor or a multiple of the chunk).
  block_n / block_n_down: output columns per program (gate/up, down); block_k: columns per loop step.
  sort_pairs: visit the local pairs sorted by expert (the down projection then adds into a zeroed fp32
  output with atomics) instead of in token order; rows_per_run: up to this many consecutive pairs of one
  expert share a dequantised tile. Defaults by token count (default_gemv_blocks). Returns [N, D] in x.dtype.
  pair_splits S: a second grid axis; program (j, s) visits positions s, s + S, ... (gate/up) and tokens s,
  s + S, ... (down), so that a few pairs still make S times the programs (needs rows_per_run 1).
  prefetch: 0, 1 or 2 (_tile_gemv: how far the K loop loads ahead).
  unroll_pairs: visit the pairs in straight-line code where their number is static (the gate/up kernel in token
  order with runs of one pair; the down kernel's top-k pairs of a token), so that the expert ids are independent
  loads rather than one per loop trip. Same results. Defaults by token count (default_gemv_blocks).
  block_k_down / num_warps_down: the down kernel's K step and warps when they should differ from the gate/up
  kernel's (None: the same). Its [BN, K step] tile per thread sets its registers, and so how many of its
  programs are resident at once.
  rank_in_kernel: with pair_splits > 1 in token order, every gate/up program ranks the local pairs itself (one
  load of the expert ids and comparisons, up to RANK_IN_KERNEL_MAX_PAIRS pairs) instead of visiting an order
  array made by XLA (a compaction and an argsort, two kernels before it). Same results.
  compact_pairs: with pair_splits > 1 in token order, the gate/up programs visit the local pairs compacted by XLA
  (True) or positions s, s + S, ... of all P = N * top_k pairs, skipping the remote ones (False: no XLA kernel
  before the gate/up kernel; pair_splits = P gives each program one pair, most of them remote and ending at once).
  Same results. The down kernel splits the tokens min(S, N) ways either way. None: True, except that with
  pair_splits also None (and runs of one pair in token order, rank_in_kernel off) default_uncompacted_pairs(N)
  chooses False with pair_splits P.
  nibble4_in_place: how the kernels extract nibble 4 (nibbles.py): a bool for both, or (gate/up, down); None:
  default_nibble4_in_place(N). Same results.
  down_row_splits R: the down kernel reduces its BN rows as R tiles of BN / R rows that share each K step's
  activation loads (as gate and up share them), so that each scale tile is loaded in the group sums' layout
  (_tile_gemv: at 4 warps and a K step of 1024, BN 8 as 2 x 4 rows leaves the down loop without barriers or
  shared memory). A power of two dividing block_n_down; None: default_down_row_splits(N, block_n_down). The same
  sums per row (another order of the final reduction is possible: float32 rounding).
  trigger_dependents: the gate/up kernel issues `griddepcontrol.launch_dependents` as its first instruction
  (custom_calls/dependent_launch.py), so that the down kernel's programs may be placed on the SMs, waiting, while
  the gate/up kernel runs, instead of after its last program exits. Same results (the down kernel still waits for
  the gate/up kernel to complete); on the GPU only (nothing is issued interpreted).
  """
  n, d = x.shape
  top_k = expert_ids.shape[1]
  e, inter, _ = logical_shape(gate_packed)
  _, _, _, _, _, dsort, drun, dsplits, _, dunroll = default_gemv_blocks(n)
  block_n, block_n_down, block_k, block_k_down, num_warps, num_stages = tile_blocks(
      n, d, inter, block_n, block_n_down, block_k, block_k_down, num_warps, num_stages)
  sort_pairs = dsort if sort_pairs is None else sort_pairs
  rows_per_run = rows_per_run or drun
  p = n * top_k
  uncompacted = (compact_pairs is None and pair_splits is None and rows_per_run == 1 and not sort_pairs
                 and not rank_in_kernel and default_uncompacted_pairs(n))
  if compact_pairs is None:
    compact_pairs = not uncompacted
  if pair_splits is None:                 # the default split needs runs of one pair
    pair_splits = p if uncompacted else dsplits if rows_per_run == 1 else 1
  check_experts("routed_experts_int4_gemv", x, gate_packed, gate_scale, up_packed, up_scale, down_packed, down_scale,
                group_size, block_k, block_k_down)
  if inter % block_n or d % block_n_down or rows_per_run & (rows_per_run - 1):
    raise ValueError(f"routed_experts_int4_gemv: block_n {block_n} must divide I = {inter}, block_n_down "
                     f"{block_n_down} must divide D = {d}, rows_per_run {rows_per_run} must be a power of two")
  if pair_splits < 1 or (pair_splits > 1 and rows_per_run != 1):
    raise ValueError(f"routed_experts_int4_gemv: pair_splits {pair_splits} must be >= 1, and above 1 only with "
                     f"rows_per_run 1 (got rows_per_run {rows_per_run})")
  (in_place_gate_up, in_place_down), down_row_splits, prefetch = tile_options(
      "routed_experts_int4_gemv", n, block_n_down, nibble4_in_place, down_row_splits, prefetch)
  if num_warps_down is not None and not is_pow2(num_warps_down):
    raise ValueError(f"routed_experts_int4_gemv: num_warps_down {num_warps_down} must be a power of two")
  ids = expert_ids.reshape(p).astype(jnp.int32)
  wts = expert_weights.reshape(p).astype(jnp.float32)
  off = jnp.reshape(jnp.asarray(expert_offset, jnp.int32), (1,))
  in_token_order = not sort_pairs and (pair_splits == 1 or not compact_pairs)
  if rank_in_kernel and (sort_pairs or pair_splits == 1 or p > RANK_IN_KERNEL_MAX_PAIRS):
    raise ValueError(f"routed_experts_int4_gemv: rank_in_kernel needs pairs in token order (sort_pairs False), "
                     f"pair_splits > 1 and at most {RANK_IN_KERNEL_MAX_PAIRS} (token, expert) pairs (got sort_pairs "
                     f"{sort_pairs}, pair_splits {pair_splits}, {p} pairs)")
  if rank_in_kernel and not compact_pairs:
    raise ValueError("routed_experts_int4_gemv: rank_in_kernel ranks the local pairs (compacts them): it cannot be "
                     "combined with compact_pairs=False")
  order_args = ()                                # in token order the kernel visits pair i at position i
  if not in_token_order and not rank_in_kernel:
    # The local pairs first (by expert when sort_pairs, else in token order): striding over them spreads
    # them evenly over the pair_splits programs.
    local = ids - off[0]
    is_local = (local >= 0) & (local < e)
    order = jnp.argsort(jnp.where(is_local, local if sort_pairs else 0, e), stable=True).astype(jnp.int32)
    count = jnp.sum(is_local.astype(jnp.int32)).reshape(1)
    order_args = (count, order)
  params = plgpu.CompilerParams(num_warps=num_warps, num_stages=num_stages)
  params_down = plgpu.CompilerParams(num_warps=num_warps_down or num_warps, num_stages=num_stages)
  common = dict(top_k=top_k, num_local=e, block_k=block_k, group_size=group_size, pair_splits=pair_splits,
                prefetch=prefetch)
  common_down = dict(common, block_k=block_k_down, nibble4_in_place=in_place_down, row_splits=down_row_splits)
  token_splits = min(pair_splits, n)             # the down kernel in token order: more splits than tokens idle
  unroll = dunroll if unroll_pairs is None else bool(unroll_pairs)
  # The constants and the f32 planes (pre-scaled) in one int32 array: one XLA kernel before these (planes_consts.py)
  xc = planes_and_consts(x, expert_offset, 2, in_place_gate_up)

  hp = pl.pallas_call(
      functools.partial(_gate_up_kernel, visits="token_order" if in_token_order else "ranked" if rank_in_kernel
                        else "order", block_n=block_n, rows_per_run=rows_per_run, h_dtype=x.dtype,
                        unroll_pairs=unroll and in_token_order and pair_splits == 1 and rows_per_run == 1,
                        nibble4_in_place=in_place_gate_up, h_nibble4_in_place=in_place_down,
                        trigger_dependents=bool(trigger_dependents), interpret=interpret, **common),
      grid=(inter // block_n, pair_splits),
      out_shape=jax.ShapeDtypeStruct((p, inter), jnp.float32),
      compiler_params=params, interpret=interpret, name="moe_int4_gate_up_gemv",
  )(xc, *order_args, ids, gate_packed, gate_scale, up_packed, up_scale)

  if not sort_pairs:
    return pl.pallas_call(
        functools.partial(_down_token_kernel, block_n=block_n_down, unroll_pairs=unroll,
                          **dict(common_down, pair_splits=token_splits)),
        grid=(d // block_n_down, token_splits),
        out_shape=jax.ShapeDtypeStruct((n, d), x.dtype),
        compiler_params=params_down, interpret=interpret, name="moe_int4_down_gemv",
    )(xc, ids, wts, hp, down_packed, down_scale)
  out = pl.pallas_call(
      functools.partial(_down_sorted_kernel, block_n=block_n_down, rows_per_run=rows_per_run, **common_down),
      grid=(d // block_n_down, pair_splits),
      out_shape=jax.ShapeDtypeStruct((n, d), jnp.float32),
      input_output_aliases={8: 0},
      compiler_params=params_down, interpret=interpret, name="moe_int4_down_gemv_sorted",
  )(xc, *order_args, ids, wts, hp, down_packed, down_scale, jnp.zeros((n, d), jnp.float32))
  return out.astype(x.dtype)


@functools.partial(jax.jit, static_argnames=("rows", "group_size", "trigger_dependents", "interpret"))
def gate_up_h_matrix(x, expert_ids, gate_packed, gate_scale, up_packed, up_scale, expert_offset=0, *, rows,
                     group_size=32, trigger_dependents=False, interpret=False):
  """h = SiLU(x W_gate^T) * (x W_up^T) of the local (token, expert) pairs as a matrix, for a down kernel that reads
  h whole (mosaic_down_prewait.py): routed_experts_int4_gemv's gate/up kernel with its defaults for N tokens, in
  token order with every pair visited by every program (pair_splits 1, unrolled), writing h in x's dtype and
  column order.

  x: [N, D]; expert_ids: int32 [N, K] global ids; gate/up words and scales as routed_experts_int4_gemv takes them
  (stored or k-chunked). Returns (h, xc): h x.dtype [rows, I], rows >= P = N * K: row p is pair p (token-major); the
  rows of remote pairs and rows >= P are not written (any bits); xc: the planes_consts.py array the kernel read (the
  down kernel reads the expert offset there, so that nothing of XLA's runs between the two kernels).
  trigger_dependents: as routed_experts_int4_gemv's.
  """
  n, d = x.shape
  top_k = expert_ids.shape[1]
  p = n * top_k
  name = "gate_up_h_matrix"
  e, inter, d8 = logical_shape(gate_packed)
  block_n, _, block_k, _, num_warps, num_stages = tile_blocks(n, d, inter, None, None, None, None, None, None)
  if x.dtype not in (jnp.bfloat16, jnp.float16, jnp.float32) or d8 * 8 != d:
    raise ValueError(f"{name}: x {x.dtype} {tuple(x.shape)} must be bf16/f16/f32 with D = {d8 * 8} columns "
                     f"(gate_packed {tuple(gate_packed.shape)})")
  if logical_shape(up_packed) != (e, inter, d8) or up_packed.ndim != gate_packed.ndim:
    raise ValueError(f"{name}: up_packed {tuple(up_packed.shape)} and gate_packed {tuple(gate_packed.shape)} must "
                     "have one shape (one layout)")
  if group_size not in KERNEL_GROUP_SIZES or d % block_k or inter % block_n or block_k < 128:
    raise ValueError(f"{name}: group_size {group_size} must be one of {KERNEL_GROUP_SIZES}, and D = {d} a multiple "
                     f"of {block_k} >= 128, I = {inter} of {block_n}")
  for what, scale in (("gate_scale", gate_scale), ("up_scale", up_scale)):
    check_scale(name, what, gate_packed, scale, group_size)
  check_block_k(name, gate_packed, block_k, multiples=True)
  if rows < p:
    raise ValueError(f"{name}: rows {rows} < {p} (token, expert) pairs")
  in_place = default_nibble4_in_place(n)[0]
  xc = planes_and_consts(x, expert_offset, 2, in_place)
  ids = expert_ids.reshape(p).astype(jnp.int32)
  h = pl.pallas_call(
      functools.partial(_gate_up_kernel, visits="token_order", top_k=top_k, num_local=e, rows_per_run=1,
                        block_n=block_n, block_k=block_k, group_size=group_size, h_dtype=x.dtype, pair_splits=1,
                        prefetch=default_gemv_blocks(n)[8], unroll_pairs=True, nibble4_in_place=in_place,
                        h_nibble4_in_place=False, trigger_dependents=bool(trigger_dependents), interpret=interpret,
                        h_planes=False),
      grid=(inter // block_n, 1),
      out_shape=jax.ShapeDtypeStruct((rows, inter), x.dtype),
      compiler_params=plgpu.CompilerParams(num_warps=num_warps, num_stages=num_stages), interpret=interpret,
      name="moe_int4_gate_up_gemv",
  )(xc, ids, gate_packed, gate_scale, up_packed, up_scale)
  return h, xc
