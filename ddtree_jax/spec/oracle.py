"""An oracle drafter built from the target itself, for tests and for measuring the ceiling of
speculative decoding: it proposes the target's own greedy continuation (by running the target
autoregressively for L steps on a scratch copy of the cache), with the target's log-probs at each
step as the draft scores, except that the greedy token scores 0 and every other token is pushed
`margin` nats lower, so that the greedy chain outranks all siblings in the best-first tree. At temperature 0 every draft is accepted, so rounds emit full blocks.
It stands in for the DFlash drafter through the same two methods the round uses.
"""
import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx


class OracleDrafter(nnx.Module):
  def __init__(self, block_size: int, margin: float = 30.0):
    self.block_size = block_size
    self.margin = margin

  def append_context(self, features, positions, n_valid, cache):
    return cache   # the oracle reads the target's own cache instead

  def draft_topk(self, target, state, topk: int):
    """-> (log-probs [B, L, K], tokens [B, L, K]) of the target along its greedy continuation."""
    b = state.bonus.shape[0]

    def step(carry, _):
      cache, tok = carry
      out = target(tok[:, None], cache.lengths[:, None], cache, jnp.ones((b, 1, 1), bool))
      cache = dataclasses.replace(out.cache, lengths=cache.lengths + 1)
      lp = jax.nn.log_softmax(out.logits[:, 0], axis=-1)
      tok = jnp.argmax(lp, axis=-1).astype(jnp.int32)
      greedy = jnp.arange(lp.shape[-1])[None, :] == tok[:, None]
      return (cache, tok), jnp.where(greedy, 0.0, lp - self.margin)

    _, lps = jax.lax.scan(step, (state.cache, state.bonus), None, length=self.block_size - 1)   # [L, B, V]
    return jax.lax.top_k(jnp.swapaxes(lps, 0, 1), topk)
