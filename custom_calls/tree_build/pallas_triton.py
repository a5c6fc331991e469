"""Best-first DDTree construction as one Pallas kernel per sequence (Triton lowering; CPU via interpret).

The XLA reference runs N sequential loop iterations of several small kernels each; here the whole
loop runs inside one program per sequence with the frontier and the node arrays held in registers as
vectors (2N+1 and N+1 slots padded to powers of two), so a round pays one launch instead of ~N x 5.
Scalar reads and writes at dynamic indices are masked reductions / selects over those vectors
(O(N) each, O(N^2) in all, as in the reference). Identical results to reference.py, ties included.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from custom_calls.pow2 import next_pow2


def _pick(vec, iota, i):
  """vec[i] for a traced scalar i (a masked reduction)."""
  return jnp.sum(jnp.where(iota == i, vec, jnp.zeros_like(vec)))


def _put(vec, iota, i, value):
  return jnp.where(iota == i, value, vec)


def _kernel(lp_ref, tok_ref, tokens_ref, parents_ref, depths_ref, scores_ref, ranks_ref, valid_ref, *,
            budget, L, K, LP, KP, FP, NP):
  b = pl.program_id(0)
  li = jnp.arange(LP, dtype=jnp.int32)[:, None]
  ki = jnp.arange(KP, dtype=jnp.int32)[None, :]
  in_lk = (li < L) & (ki < K)
  lp = plgpu.load(lp_ref.at[b], mask=in_lk, other=0.0)            # [LP, KP] f32
  tok = plgpu.load(tok_ref.at[b], mask=in_lk, other=0)            # [LP, KP] i32
  neg_inf = jnp.float32(-jnp.inf)
  lowest = jnp.float32(jnp.finfo(jnp.float32).min)
  fi = jnp.arange(FP, dtype=jnp.int32)
  ni = jnp.arange(NP, dtype=jnp.int32)

  def lp_at(d, r):
    return jnp.sum(jnp.where((li == d) & (ki == r), lp, 0.0))

  def tok_at(d, r):
    return jnp.sum(jnp.where((li == d) & (ki == r), tok, 0))

  c_score = jnp.where(fi == 0, lp_at(0, 0), neg_inf)
  c_depth = jnp.where(fi == 0, 1, 0).astype(jnp.int32)
  c_rank = jnp.zeros((FP,), jnp.int32)
  c_parent = jnp.zeros((FP,), jnp.int32)
  c_alive = (fi == 0).astype(jnp.int32)
  tokens = jnp.zeros((NP,), jnp.int32)
  parents = jnp.full((NP,), -1, jnp.int32)
  depths = jnp.zeros((NP,), jnp.int32)
  scores = jnp.where(ni == 0, 0.0, neg_inf).astype(jnp.float32)
  ranks = jnp.full((NP,), -1, jnp.int32)
  valid = (ni == 0).astype(jnp.int32)

  def body(i, st):
    c_score, c_depth, c_rank, c_parent, c_alive, count, tokens, parents, depths, scores, ranks, valid = st
    n = i + 1
    key = jnp.where(c_alive > 0, jnp.maximum(c_score, lowest), neg_inf)
    best = jnp.max(key)
    s = jnp.min(jnp.where(key == best, fi, FP))                   # first index of the max
    ok = _pick(c_alive, fi, s) > 0
    d, r, p = _pick(c_depth, fi, s), _pick(c_rank, fi, s), _pick(c_parent, fi, s)
    sc = jnp.max(jnp.where(fi == s, c_score, neg_inf))            # exact (a sum would turn -inf to NaN)
    c_alive = _put(c_alive, fi, s, 0)
    tokens = _put(tokens, ni, n, jnp.where(ok, tok_at(d - 1, r), 0))
    parents = _put(parents, ni, n, jnp.where(ok, p, -1))
    depths = _put(depths, ni, n, jnp.where(ok, d, 0))
    scores = _put(scores, ni, n, jnp.where(ok, sc, neg_inf))
    ranks = _put(ranks, ni, n, jnp.where(ok, r, -1))
    valid = _put(valid, ni, n, ok.astype(jnp.int32))
    parent_score = jnp.max(jnp.where(ni == p, scores, neg_inf))
    sib_ok = ok & (r + 1 < K)
    c_score = _put(c_score, fi, count, parent_score + lp_at(d - 1, jnp.minimum(r + 1, K - 1)))
    c_depth = _put(c_depth, fi, count, d)
    c_rank = _put(c_rank, fi, count, r + 1)
    c_parent = _put(c_parent, fi, count, p)
    c_alive = _put(c_alive, fi, count, sib_ok.astype(jnp.int32))
    count = count + sib_ok.astype(jnp.int32)
    ch_ok = ok & (d < L)
    c_score = _put(c_score, fi, count, sc + lp_at(jnp.minimum(d, L - 1), 0))
    c_depth = _put(c_depth, fi, count, d + 1)
    c_rank = _put(c_rank, fi, count, 0)
    c_parent = _put(c_parent, fi, count, n)
    c_alive = _put(c_alive, fi, count, ch_ok.astype(jnp.int32))
    count = count + ch_ok.astype(jnp.int32)
    return c_score, c_depth, c_rank, c_parent, c_alive, count, tokens, parents, depths, scores, ranks, valid

  st = (c_score, c_depth, c_rank, c_parent, c_alive, jnp.int32(1), tokens, parents, depths, scores, ranks, valid)
  st = jax.lax.fori_loop(0, budget, body, st)
  _, _, _, _, _, _, tokens, parents, depths, scores, ranks, valid = st
  for ref, v in ((tokens_ref, tokens), (parents_ref, parents), (depths_ref, depths), (scores_ref, scores),
                 (ranks_ref, ranks), (valid_ref, valid)):
    plgpu.store(ref.at[b], v)


@functools.partial(jax.jit, static_argnames=("budget", "num_warps", "interpret"))
def tree_build_pallas(topk_logprobs, topk_tokens, *, budget: int, num_warps: int = 4, interpret: bool = False):
  """Same contract as reference.tree_build_reference."""
  b, L, K = topk_logprobs.shape
  LP, KP = next_pow2(L), next_pow2(K)
  FP, NP = next_pow2(2 * budget + 1), next_pow2(budget + 1)
  lp = jnp.pad(topk_logprobs.astype(jnp.float32), ((0, 0), (0, LP - L), (0, KP - K)))
  tok = jnp.pad(topk_tokens.astype(jnp.int32), ((0, 0), (0, LP - L), (0, KP - K)))
  kernel = functools.partial(_kernel, budget=budget, L=L, K=K, LP=LP, KP=KP, FP=FP, NP=NP)
  out_shape = [jax.ShapeDtypeStruct((b, NP), jnp.int32)] * 3 + [jax.ShapeDtypeStruct((b, NP), jnp.float32)] + \
              [jax.ShapeDtypeStruct((b, NP), jnp.int32)] * 2
  tokens, parents, depths, scores, ranks, valid = pl.pallas_call(
      kernel, out_shape=out_shape, grid=(b,),
      compiler_params=plgpu.CompilerParams(num_warps=num_warps, num_stages=1),
      interpret=interpret)(lp, tok)
  n1 = budget + 1
  return (tokens[:, :n1], parents[:, :n1], depths[:, :n1], scores[:, :n1], ranks[:, :n1], valid[:, :n1] > 0)
