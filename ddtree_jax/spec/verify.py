"""The walk of a verified tree: from the root, follow the child whose token equals the target's
token at the current node, while one exists; the target's token at the last accepted node is the
next bonus token. Lossless at any temperature: every emitted token is the target's own choice given
the accepted prefix. Siblings are distinct tokens, so at most one child matches.
"""
import jax
import jax.numpy as jnp


def walk_tree(tree_tokens, parents, valid, target_tokens, max_depth: int):
  """tree_tokens, parents, target_tokens: [B, N+1] int32 (index 0 = root, parents[:, 0] = -1);
  valid: [B, N+1] bool; max_depth: static bound on accepted nodes (the draft length L).

  Returns (path [B, max_depth+1] int32 tree indices of the root and accepted nodes, padded by
  repeating the last accepted index; n_accepted [B] int32 in [1, max_depth+1] counting the root;
  bonus [B] int32).
  """
  b, n1 = tree_tokens.shape

  def step(carry, _):
    cur, alive, count = carry                                       # [B], [B] bool, [B]
    want = jnp.take_along_axis(target_tokens, cur[:, None], axis=1)  # [B, 1]
    match = valid & (parents == cur[:, None]) & (tree_tokens == want)   # [B, N+1]
    found = jnp.any(match, axis=1) & alive
    child = jnp.argmax(match, axis=1).astype(jnp.int32)
    cur = jnp.where(found, child, cur)
    return (cur, found, count + found.astype(jnp.int32)), cur

  init = (jnp.zeros((b,), jnp.int32), jnp.ones((b,), bool), jnp.ones((b,), jnp.int32))
  (last, _, n_acc), visited = jax.lax.scan(step, init, None, length=max_depth)
  path = jnp.concatenate([jnp.zeros((b, 1), jnp.int32), visited.T], axis=1)   # [B, max_depth+1]
  bonus = jnp.take_along_axis(target_tokens, last[:, None], axis=1)[:, 0]
  return path, n_acc, bonus
