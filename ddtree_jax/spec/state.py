"""The state of a batch of generations, carried from one compiled round to the next (donated)."""
from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import jax.numpy as jnp

from ddtree_jax.cache import LatentCache


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class GenerationState:
  cache: LatentCache            # target latent cache; lengths = committed tokens
  drafter_cache: Optional[object]  # DrafterCache of context entries (None in AR mode)
  bonus: jax.Array              # [B] int32: the next token to feed (emitted, not yet in the cache)
  key: jax.Array                # PRNG key
  out: jax.Array                # [B, max_new + block] int32 generated tokens (the first out_len valid)
  out_len: jax.Array            # [B] int32
  max_new: jax.Array            # [B] int32 per-request max_new_tokens
  done: jax.Array               # [B] bool
  rounds: jax.Array             # [B] int32 rounds run while not done (prefill not counted)
  per_round: jax.Array          # [B, max_rounds] int32 tokens emitted by each round
  stop_ids: jax.Array           # [B, S] int32 stop tokens per request, padded with -1 (a runtime value:
                                # new stop sets do not recompile)
  expected: Optional[jax.Array] = None  # [B, C] fp32 running drafter-expected tokens per round for each
                                        # candidate budget of --budget=auto (spec/auto_budget.py); else None
  logprobs: Optional[jax.Array] = None  # [B, max_new + block] fp32: the target's log-probability of each token of
                                        # `out` (sampling.token_logprobs), when asked for (Engine.run logprobs)


def emit_tokens(state: GenerationState, emit, n_emit, emit_logprobs=None):
  """Appends up to n_emit[b] tokens of emit [B, W] to the output, cutting at the first stop token
  (which is kept) and at max_new. Finished sequences emit nothing. Returns (state, n_kept [B]).
  emit_logprobs: fp32 [B, W], the tokens' log-probabilities, written beside them when the state keeps them
  (None: the state's logprobs are left as they are)."""
  b, w = emit.shape
  idx = jnp.arange(w)[None, :]
  in_range = idx < n_emit[:, None]
  is_stop = jnp.any(emit[:, :, None] == state.stop_ids[:, None, :], axis=-1) & in_range   # -1 never matches
  has_stop = jnp.any(is_stop, axis=1)
  first_stop = jnp.where(has_stop, jnp.argmax(is_stop, axis=1), w)
  remaining = state.max_new - state.out_len
  n_kept = jnp.minimum(jnp.minimum(n_emit, first_stop + 1), remaining)
  n_kept = jnp.where(state.done, 0, jnp.maximum(n_kept, 0)).astype(jnp.int32)
  stopped = has_stop & (first_stop < n_kept)
  def append(rows, values):
    """rows [B, out_width] with each unfinished row's n_kept values [B, W] written at its out_len."""
    kept = jnp.where(idx < n_kept[:, None], values, 0).astype(rows.dtype)
    written = jax.vmap(lambda row, v, start: jax.lax.dynamic_update_slice(row, v, (start,)))(rows, kept, state.out_len)
    return jnp.where(state.done[:, None], rows, written)
  out = append(state.out, emit)
  logprobs = state.logprobs
  if logprobs is not None and emit_logprobs is not None:
    logprobs = append(logprobs, emit_logprobs)
  out_len = state.out_len + n_kept
  done = state.done | stopped | (out_len >= state.max_new)
  active = ~state.done
  rounds = state.rounds + active.astype(jnp.int32)
  per_round = jax.vmap(lambda r, v, i, a: jnp.where(a, r.at[i].set(v), r))(
      state.per_round, n_kept, jnp.minimum(state.rounds, state.per_round.shape[1] - 1), active)
  new = dataclasses.replace(state, out=out, out_len=out_len, done=done, rounds=rounds, per_round=per_round,
                            logprobs=logprobs)
  return new, n_kept
