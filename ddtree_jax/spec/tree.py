"""The DDTree draft tree, built on the device with fixed shapes (REFERENCE.md section 3).

Given the drafter's per-position top-K log-probabilities (sorted descending, normalised over the full
vocabulary), the optimal tree of budget N is the set of the N highest-scoring prefixes, where the
score of u = (u_1..u_d) is sum_i log q_i(u_i). It is found best-first: a frontier of candidates
(depth d, rank r under a parent) starts with (1, 0); each step pops the best candidate, which becomes
node n, then pushes its next sibling (same parent, rank r+1) and, if d < L, its first child (depth d+1,
rank 0). After N pops the nodes are exactly a top-N set, prefix-closed, in topological order (a parent
is popped before its children, because a child never scores above its parent).

The construction itself is the custom call `custom_calls.tree_build` (an XLA loop, or one Pallas
program per sequence on the GPU); the ancestor mask is derived from the parents here.
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

from custom_calls.tree_build import ancestors_from_parents, tree_build


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
  tokens, parents, depths, scores, ranks, valid = tree_build(topk_logprobs, topk_tokens, budget)
  anc = ancestors_from_parents(parents, L)
  root = jnp.full((b,), -1, jnp.int32) if root_tokens is None else root_tokens.astype(jnp.int32)
  tokens = tokens.at[:, 0].set(root)
  return Tree(tokens=tokens, parents=parents, depths=depths, ancestors=anc, valid=valid, scores=scores,
              ranks=ranks)


def position_ids(tree: Tree, start) -> jax.Array:
  """start: [B] int32 (the root's position = committed length) -> [B, N+1] start + depth."""
  return start.astype(jnp.int32)[:, None] + tree.depths
