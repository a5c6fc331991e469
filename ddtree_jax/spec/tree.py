"""The DDTree draft tree, built on the device with fixed shapes (REFERENCE.md section 3).

Given the drafter's per-position top-K log-probabilities (sorted descending, normalised over the full
vocabulary), the optimal tree of budget N is the set of the N highest-scoring prefixes, where the
score of u = (u_1..u_d) is sum_i log q_i(u_i). It is found best-first: a frontier of candidates
(depth d, rank r under a parent) starts with (1, 0); each step pops the best candidate, which becomes
node n, then pushes its next sibling (same parent, rank r+1) and, if d < L, its first child (depth d+1,
rank 0). After N pops the nodes are exactly a top-N set, prefix-closed, in topological order (a parent
is popped before its children, because a child never scores above its parent).

On the device the frontier is a fixed array of 2N+1 slots (append-only: each pop adds at most two),
and each of the N pops is an argmax over it, so the cost is O(N^2) per sequence (N steps of O(N) work:
the argmax over the frontier and the copy of the parent's ancestor row). The loop is sequential in N
(`lax.fori_loop`) and vectorised over the batch. Ties are broken deterministically: among equal
scores the candidate pushed first wins (first index of the argmax).

Node layout: index 0 is the root (the bonus token, already accepted), nodes 1..N in pop order.
Slots left over when fewer than N prefixes exist (L*K small) are padding: valid False, token 0,
parent -1, depth 0, score -inf, rank -1; a padding node sees only the root and itself, and no node
sees it.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import jax.numpy as jnp


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Tree:
  tokens: jax.Array     # [B, N+1] int32; index 0 = root (root_tokens, or -1)
  parents: jax.Array    # [B, N+1] int32; root -1, padding -1
  depths: jax.Array     # [B, N+1] int32; root 0, a node at depth d predicts the token at start + d
  ancestors: jax.Array  # [B, N+1, N+1] bool; [i, j] iff j is an ancestor of i or j == i (root included)
  valid: jax.Array      # [B, N+1] bool; root always True
  scores: jax.Array     # [B, N+1] fp32 log q(prefix); root 0, padding -inf
  ranks: jax.Array      # [B, N+1] int32 rank of the node's token among its position's top-K; root/padding -1

  @property
  def budget(self) -> int:
    return self.tokens.shape[1] - 1


def _build_one(lp, tok, budget: int):
  """lp: [L, K] fp32; tok: [L, K] int32 -> per-sequence tree arrays (root token filled by the caller)."""
  L, K = lp.shape
  n1 = budget + 1
  F = 2 * budget + 1
  neg_inf = jnp.float32(-jnp.inf)
  lowest = jnp.float32(jnp.finfo(jnp.float32).min)

  # Frontier (append-only). Slot 0 holds the first candidate: depth 1, rank 0, parent = root.
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
  eye = jnp.eye(n1, dtype=bool)
  anc = eye.at[:, 0].set(True)          # every row sees the root and itself (padding stays like this)

  def body(i, st):
    (c_score, c_depth, c_rank, c_parent, c_alive, count,
     tokens, parents, depths, scores, ranks, valid, anc) = st
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
    anc = anc.at[n].set(jnp.where(ok, anc[p] | eye[n], anc[n]))

    # Next sibling: same parent, rank r + 1 (score from the parent's, no -inf - -inf).
    sib_ok = ok & (r + 1 < K)
    sib_score = scores[p] + lp[d - 1, jnp.minimum(r + 1, K - 1)]
    c_score = c_score.at[count].set(sib_score)
    c_depth = c_depth.at[count].set(d)
    c_rank = c_rank.at[count].set(r + 1)
    c_parent = c_parent.at[count].set(p)
    c_alive = c_alive.at[count].set(sib_ok)
    count = count + sib_ok.astype(jnp.int32)
    # First child: depth d + 1, rank 0, parent n.
    ch_ok = ok & (d < L)
    ch_score = sc + lp[jnp.minimum(d, L - 1), 0]
    c_score = c_score.at[count].set(ch_score)
    c_depth = c_depth.at[count].set(d + 1)
    c_rank = c_rank.at[count].set(0)
    c_parent = c_parent.at[count].set(n)
    c_alive = c_alive.at[count].set(ch_ok)
    count = count + ch_ok.astype(jnp.int32)
    return (c_score, c_depth, c_rank, c_parent, c_alive, count,
            tokens, parents, depths, scores, ranks, valid, anc)

  st = (c_score, c_depth, c_rank, c_parent, c_alive, count,
        tokens, parents, depths, scores, ranks, valid, anc)
  st = jax.lax.fori_loop(0, budget, body, st)
  return st[6:]


def build_tree(topk_logprobs, topk_tokens, budget: int, root_tokens: Optional[jax.Array] = None) -> Tree:
  """Best-first DDTree of `budget` nodes (static) per sequence.

  topk_logprobs: [B, L, K] log q_i of the top-K tokens at draft position i (i = 1..L), sorted
    descending along K and normalised over the full vocabulary; topk_tokens: [B, L, K] int32;
  root_tokens: [B] int32 (the bonus tokens) or None (root token -1).
  Returns a `Tree` with N+1 = budget+1 slots. Cost O(budget^2) per sequence (see the module doc).
  """
  if budget < 1:
    raise ValueError(f"build_tree: budget must be >= 1, got {budget}")
  b, L, K = topk_logprobs.shape
  if topk_tokens.shape != (b, L, K):
    raise ValueError(f"build_tree: topk_tokens shape {topk_tokens.shape} != topk_logprobs shape {(b, L, K)}")
  lp = topk_logprobs.astype(jnp.float32)
  tok = topk_tokens.astype(jnp.int32)
  tokens, parents, depths, scores, ranks, valid, anc = jax.vmap(
      lambda a, t: _build_one(a, t, budget))(lp, tok)
  root = jnp.full((b,), -1, jnp.int32) if root_tokens is None else root_tokens.astype(jnp.int32)
  tokens = tokens.at[:, 0].set(root)
  return Tree(tokens=tokens, parents=parents, depths=depths, ancestors=anc, valid=valid, scores=scores,
              ranks=ranks)


def position_ids(tree: Tree, start) -> jax.Array:
  """start: [B] int32 (the root's position = committed length) -> [B, N+1] start + depth."""
  return start.astype(jnp.int32)[:, None] + tree.depths
