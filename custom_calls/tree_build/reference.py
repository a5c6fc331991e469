"""Best-first DDTree construction in plain XLA (the oracle and the CPU fallback).

Per sequence: a frontier of candidates (depth d, rank r under a parent) starts with (1, 0); each of
the N steps pops the best (argmax, first index on ties), records it as node n, then appends its next
sibling (same parent, rank r+1, if r+1 < K) and its first child (depth d+1, rank 0, if d < L) to the
append-only frontier of 2N+1 slots. A candidate's score is its parent's score plus its own log-prob
(never a difference, so -inf log-probs stay well defined). Node 0 is the root. Slots left when fewer
than N prefixes exist are padding: valid False, token 0, parent -1, depth 0, score -inf, rank -1.
Cost O(N^2) per sequence, sequential in N.
"""
import jax
import jax.numpy as jnp


def _build_one(lp, tok, budget: int):
  """lp: [L, K] fp32; tok: [L, K] int32 -> (tokens, parents, depths, scores, ranks, valid) [N+1] each."""
  L, K = lp.shape
  n1 = budget + 1
  F = 2 * budget + 1
  neg_inf = jnp.float32(-jnp.inf)
  lowest = jnp.float32(jnp.finfo(jnp.float32).min)

  c_score = jnp.full((F,), neg_inf).at[0].set(lp[0, 0])
  c_depth = jnp.zeros((F,), jnp.int32).at[0].set(1)
  c_rank = jnp.zeros((F,), jnp.int32)
  c_parent = jnp.zeros((F,), jnp.int32)
  c_alive = jnp.zeros((F,), bool).at[0].set(True)
  count = jnp.int32(1)
  tokens = jnp.zeros((n1,), jnp.int32)
  parents = jnp.full((n1,), -1, jnp.int32)
  depths = jnp.zeros((n1,), jnp.int32)
  scores = jnp.full((n1,), neg_inf).at[0].set(0.0)
  ranks = jnp.full((n1,), -1, jnp.int32)
  valid = jnp.zeros((n1,), bool).at[0].set(True)

  def body(i, st):
    c_score, c_depth, c_rank, c_parent, c_alive, count, tokens, parents, depths, scores, ranks, valid = st
    n = i + 1
    # A -inf score is still a real prefix: rank it above dead slots.
    key = jnp.where(c_alive, jnp.maximum(c_score, lowest), neg_inf)
    s = jnp.argmax(key)
    ok = c_alive[s]
    d, r, p, sc = c_depth[s], c_rank[s], c_parent[s], c_score[s]
    c_alive = c_alive.at[s].set(False)
    tokens = tokens.at[n].set(jnp.where(ok, tok[d - 1, r], 0))
    parents = parents.at[n].set(jnp.where(ok, p, -1))
    depths = depths.at[n].set(jnp.where(ok, d, 0))
    scores = scores.at[n].set(jnp.where(ok, sc, neg_inf))
    ranks = ranks.at[n].set(jnp.where(ok, r, -1))
    valid = valid.at[n].set(ok)
    # Next sibling: same parent, rank r + 1.
    sib_ok = ok & (r + 1 < K)
    c_score = c_score.at[count].set(scores[p] + lp[d - 1, jnp.minimum(r + 1, K - 1)])
    c_depth = c_depth.at[count].set(d)
    c_rank = c_rank.at[count].set(r + 1)
    c_parent = c_parent.at[count].set(p)
    c_alive = c_alive.at[count].set(sib_ok)
    count = count + sib_ok.astype(jnp.int32)
    # First child: depth d + 1, rank 0, parent n.
    ch_ok = ok & (d < L)
    c_score = c_score.at[count].set(sc + lp[jnp.minimum(d, L - 1), 0])
    c_depth = c_depth.at[count].set(d + 1)
    c_rank = c_rank.at[count].set(0)
    c_parent = c_parent.at[count].set(n)
    c_alive = c_alive.at[count].set(ch_ok)
    count = count + ch_ok.astype(jnp.int32)
    return c_score, c_depth, c_rank, c_parent, c_alive, count, tokens, parents, depths, scores, ranks, valid

  st = (c_score, c_depth, c_rank, c_parent, c_alive, count, tokens, parents, depths, scores, ranks, valid)
  st = jax.lax.fori_loop(0, budget, body, st)
  return st[6:]


def tree_build_reference(topk_logprobs, topk_tokens, budget: int):
  """topk_logprobs: [B, L, K] fp32 (sorted descending per position); topk_tokens: [B, L, K] int32.
  Returns tokens, parents, depths, scores, ranks, valid: [B, N+1] each (root at 0, token 0)."""
  return jax.vmap(lambda a, t: _build_one(a, t, budget))(topk_logprobs.astype(jnp.float32),
                                                         topk_tokens.astype(jnp.int32))


def ancestors_from_parents(parents, max_depth: int):
  """parents: [B, N+1] (root and padding -1) -> [B, N+1, N+1] bool: [i, j] iff j is an ancestor of i or
  j == i; every row sees the root (padding rows see only the root and themselves)."""
  b, n1 = parents.shape
  idx = jnp.arange(n1)
  anc = (idx[None, :, None] == idx[None, None, :]) | (idx[None, None, :] == 0)
  anc = jnp.broadcast_to(anc, (b, n1, n1))
  cur = jnp.broadcast_to(idx, (b, n1))
  for _ in range(max_depth):
    cur = jnp.take_along_axis(parents, jnp.maximum(cur, 0), axis=1)
    cur = jnp.where(cur >= 0, cur, -1)
    anc = anc | (cur[:, :, None] == idx[None, None, :])
  return anc
