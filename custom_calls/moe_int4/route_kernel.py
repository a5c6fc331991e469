"""The grouped MoE kernels' routing in one launch, for a few (token, k) pairs.

`pallas_triton.route` sorts the local pairs by expert and pads each expert's rows to a multiple of block_m. Done in
XLA, even by comparisons (no argsort), that is about ten small kernels; on the H200 (benchmarks/RESULTS.md, issue 6
eleventh round, ncu) 10 fusions of 2.0-2.6 us each at 8 tokens, against ~100 us for the whole layer. Here one
program computes the same outputs from the expert ids alone, as comparison masks held in registers:

  key[p]     local expert of pair p, or E (routed to another device, or past the P pairs)
  rank[p]    pairs before p with the same key                          [P2, P2] mask
  counts[e]  pairs of expert e; padded[e] = counts rounded up to block_m   [P2, E2] mask
  pend[e]    inclusive sum of padded over e' <= e; pstart = pend - padded  [E2, E2] mask
  pos[p]     pstart[key[p]] + rank[p] (p_pad - 1 for a non-local pair)      [P2, E2] select
  row_token  token of pair p at slot pos[p] (a scatter); N at each expert's padding slots
             [pstart[e] + counts[e], pend[e]) and at the slots past pend[E-1]  [E2, block_m] and [P_pad] stores
  block b    valid when b * block_m < pend[E-1]; expert min(#{e: pend[e] <= b * block_m}, E - 1)

The result equals `route`'s bit for bit (tests/test_moe_route_kernel.py). The masks are [P2, P2] with P2 the
pairs rounded up to a power of two, so the kernel is for at most MAX_PAIRS pairs; `route` keeps the XLA forms above.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from custom_calls.pow2 import next_pow2

MAX_PAIRS = 128          # [128, 128] masks: 64 values a thread at 8 warps


def padded_pairs(num_pairs, num_local, block_m):
  """P_pad: room for every local pair with each expert's rows padded to a multiple of block_m."""
  return pl.cdiv(num_pairs + min(num_local, num_pairs) * (block_m - 1), block_m) * block_m


def _route_kernel(off_ref, ids_ref, row_token_ref, pos_ref, block_valid_ref, block_expert_ref, *, num_pairs, top_k,
                  num_local, block_m):
  """off [1] i32 expert offset; ids [P] i32 global expert ids (token-major); outputs as in route_pallas."""
  p_pad = row_token_ref.shape[0]
  nb = block_valid_ref.shape[0]
  p2, e2 = next_pow2(num_pairs), next_pow2(num_local)
  first = pl.program_id(0) * 0           # a traced zero: the masked load may reach past P
  pairs = jnp.arange(p2, dtype=jnp.int32)                                            # [P2]
  in_range = pairs < num_pairs
  local = plgpu.load(ids_ref.at[pl.ds(first, p2)], mask=in_range, other=0) - off_ref[0]
  key = jnp.where(in_range & (local >= 0) & (local < num_local), local, num_local)   # [P2]
  experts = jnp.arange(e2, dtype=jnp.int32)                                          # [E2]
  real = experts < num_local                                                         # E2 rounds E up

  same_before = (key[None, :] == key[:, None]) & (pairs[None, :] < pairs[:, None])  # [P2 p, P2 q]: q before p
  rank = jnp.sum(same_before.astype(jnp.int32), axis=1)                              # [P2]
  is_key = (key[:, None] == experts[None, :]) & real[None, :]                        # [P2, E2]
  counts = jnp.sum(is_key.astype(jnp.int32), axis=0)                                 # [E2]; 0 past E
  padded = (counts + (block_m - 1)) // block_m * block_m
  upto = experts[None, :] <= experts[:, None]                                        # [E2 e, E2 e']: e' <= e
  pend = jnp.sum(jnp.where(upto, padded[None, :], 0), axis=1)                        # [E2] inclusive sums
  pstart = pend - padded
  total = jnp.sum(padded)                                                            # pend[E - 1]

  start_of_key = jnp.sum(jnp.where(is_key, pstart[None, :], 0), axis=1)             # [P2]
  pos = jnp.where(key < num_local, start_of_key + rank, p_pad - 1)
  plgpu.store(pos_ref.at[pl.ds(first, p2)], pos, mask=in_range)

  # row_token, in three sets of slots that do not overlap (so no store can land after another to the same slot):
  # the pairs' own slots (a scatter), each expert's padding after its pairs, and the slots past the last expert.
  plgpu.store(row_token_ref.at[pos], pairs // top_k, mask=key < num_local)
  n = num_pairs // top_k
  pad = jnp.arange(block_m, dtype=jnp.int32)                                          # [BM]
  pad_slot = (pstart + counts)[:, None] + pad[None, :]                                # [E2, BM]
  plgpu.store(row_token_ref.at[pad_slot], jnp.full((e2, block_m), n, jnp.int32),
              mask=(pad[None, :] < (padded - counts)[:, None]) & real[:, None])
  tail = jnp.arange(next_pow2(p_pad), dtype=jnp.int32)
  plgpu.store(row_token_ref.at[pl.ds(first, tail.shape[0])], jnp.full(tail.shape, n, jnp.int32),
              mask=(tail >= total) & (tail < p_pad))

  nb2 = next_pow2(nb)
  bstart = jnp.arange(nb2, dtype=jnp.int32) * block_m                               # [NB2]
  ends_before = (pend[None, :] <= bstart[:, None]) & real[None, :]                   # [NB2, E2]
  bexp = jnp.minimum(jnp.sum(ends_before.astype(jnp.int32), axis=1), num_local - 1)
  bmask = jnp.arange(nb2, dtype=jnp.int32) < nb
  plgpu.store(block_valid_ref.at[pl.ds(first, nb2)], (bstart < total).astype(jnp.int32), mask=bmask)
  plgpu.store(block_expert_ref.at[pl.ds(first, nb2)], bexp.astype(jnp.int32), mask=bmask)


@functools.partial(jax.jit, static_argnames=("num_local", "block_m", "num_warps", "interpret"))
def route_pallas(expert_ids, expert_offset, *, num_local, block_m, num_warps=8, interpret=False):
  """expert_ids [N, K] global ids (N * K <= MAX_PAIRS); expert_offset: scalar (may be traced) ->
  (row_token [P_pad] (N marks padding), pos [N, K], block_valid [NB] i32, block_expert [NB] i32), as
  pallas_triton.route (which also returns is_local)."""
  n, k = expert_ids.shape
  p = n * k
  if p > MAX_PAIRS:
    raise ValueError(f"route_pallas: {n} tokens x top-{k} = {p} pairs, at most {MAX_PAIRS} ([P, P] masks in "
                     "registers); pallas_triton.route takes any number")
  p_pad = padded_pairs(p, num_local, block_m)
  nb = p_pad // block_m
  off = jnp.reshape(jnp.asarray(expert_offset, jnp.int32), (1,))
  row_token, pos, block_valid, block_expert = pl.pallas_call(
      functools.partial(_route_kernel, num_pairs=p, top_k=k, num_local=num_local, block_m=block_m),
      grid=(1,),
      out_shape=(jax.ShapeDtypeStruct((p_pad,), jnp.int32), jax.ShapeDtypeStruct((p,), jnp.int32),
                 jax.ShapeDtypeStruct((nb,), jnp.int32), jax.ShapeDtypeStruct((nb,), jnp.int32)),
      compiler_params=plgpu.CompilerParams(num_warps=num_warps, num_stages=1),
      interpret=interpret, name="moe_int4_route",
  )(off, expert_ids.reshape(p).astype(jnp.int32))
  return row_token, pos.reshape(n, k), block_valid, block_expert
