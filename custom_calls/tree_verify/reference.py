"""The walk of a verified tree in plain XLA (the oracle and the CPU fallback).

From the root, follow the child whose token equals the target's token at the current node, while one
exists; the target's token at the last accepted node is the bonus. Siblings are distinct tokens, so
at most one child matches. Lossless at any temperature: every emitted token is the target's choice.
"""
import jax
import jax.numpy as jnp


def tree_walk_reference(tree_tokens, parents, valid, target_tokens, max_depth: int):
  """tree_tokens, parents, target_tokens: [B, N+1] int32 (index 0 = root, parents[:, 0] = -1);
  valid: [B, N+1] bool; max_depth: static bound on accepted nodes.

  Returns (path [B, max_depth+1] int32: tree indices of the root and the accepted nodes, padded by
  repeating the last accepted index; n_accepted [B] int32 in [1, max_depth+1], the root counted;
  bonus [B] int32)."""
  b, _ = tree_tokens.shape

  def step(carry, _):
    cur, alive, count = carry
    want = jnp.take_along_axis(target_tokens, cur[:, None], axis=1)
    match = valid & (parents == cur[:, None]) & (tree_tokens == want)
    found = jnp.any(match, axis=1) & alive
    child = jnp.argmax(match, axis=1).astype(jnp.int32)
    cur = jnp.where(found, child, cur)
    return (cur, found, count + found.astype(jnp.int32)), cur

  init = (jnp.zeros((b,), jnp.int32), jnp.ones((b,), bool), jnp.ones((b,), jnp.int32))
  (last, _, n_acc), visited = jax.lax.scan(step, init, None, length=max_depth)
  path = jnp.concatenate([jnp.zeros((b, 1), jnp.int32), visited.T], axis=1)
  bonus = jnp.take_along_axis(target_tokens, last[:, None], axis=1)[:, 0]
  return path, n_acc, bonus
