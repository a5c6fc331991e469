"""One round of generation as one pure function; `rounds` loops it on the device, and the engine jits that into one
XLA program (RoundSpec.rounds_per_call rounds a call).

Modes share this code: `ar` feeds the bonus token alone; `dflash` verifies the chain of the
drafter's per-position argmaxes (a tree with one child per node); `ddtree` verifies the best-first
tree of `budget` nodes. No host transfer happens inside a round.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from ddtree_jax.cache import LatentCache, compact_block
from ddtree_jax.sampling import SamplingParams, choose_tokens, token_logprobs
from ddtree_jax.spec.state import GenerationState, emit_tokens
from ddtree_jax.spec.tree import build_tree
from ddtree_jax.spec.verify import walk_tree
from ddtree_jax.topk import top_k


@dataclasses.dataclass(frozen=True)
class RoundSpec:
  """Static description of a round (one compiled program per distinct RoundSpec)."""
  mode: str                      # "ar" | "dflash" | "ddtree"
  budget: int = 0                # tree nodes N (root not counted); dflash: block_size - 1
  topk: int = 1                  # candidates per draft position, min(N, V)
  block_size: int = 0
  mask_token_id: int = 0
  feature_layers: tuple[int, ...] = ()
  sampling: SamplingParams = SamplingParams()
  auto_budgets: tuple[int, ...] = ()   # --budget=auto: candidates whose expected tokens the round tracks
  rounds_per_call: int = 1             # rounds one compiled call runs (a device loop; it stops early once every
                                       # sequence is done): the host's per-call cost is paid once per this many

  def prefill_spec(self) -> "RoundSpec":
    """What the prefill (spec/prefill.py) depends on (so that modes and budgets share its programs)."""
    if self.mode == "ar":
      return RoundSpec(mode="ar", sampling=self.sampling)
    return RoundSpec(mode="ddtree", feature_layers=self.feature_layers, sampling=self.sampling)


def rounds(target, drafter, state: GenerationState, spec: RoundSpec) -> GenerationState:
  """spec.rounds_per_call rounds (AR or speculative), fewer if every sequence is done first: a device loop, so
  one compiled call runs them all. Each round is exactly the one-round program's computation."""
  def one(st):
    return ar_round(target, st, spec) if spec.mode == "ar" else speculative_round(target, drafter, st, spec)
  if spec.rounds_per_call == 1:
    return one(state)
  def more(carry):
    i, st = carry
    return (i < spec.rounds_per_call) & ~jnp.all(st.done)
  return jax.lax.while_loop(more, lambda carry: (carry[0] + 1, one(carry[1])), (jnp.int32(0), state))[1]


def ar_round(target, state: GenerationState, spec: RoundSpec) -> GenerationState:
  b = state.bonus.shape[0]
  start = state.cache.lengths
  active = ~state.done
  out = target(state.bonus[:, None], start[:, None], state.cache, jnp.ones((b, 1, 1), bool))
  key, sub = jax.random.split(state.key)
  nxt = choose_tokens(out.logits[:, 0], sub, spec.sampling, getattr(target, "mesh", None))
  cache = dataclasses.replace(out.cache, lengths=start + active.astype(jnp.int32))
  state = dataclasses.replace(state, cache=cache, key=key, bonus=jnp.where(active, nxt, state.bonus))
  lp = None if state.logprobs is None else token_logprobs(out.logits[:, :1], nxt[:, None])     # [B, 1]
  state, _ = emit_tokens(state, nxt[:, None], jnp.ones((b,), jnp.int32), lp)
  return state


def draft_distributions(target, drafter, state: GenerationState, spec: RoundSpec):
  """Runs the drafter on [bonus, MASK x (B-1)] -> top-K log-probs and tokens per draft position
  ([B, L, K] each, L = block_size - 1), normalised over the full vocabulary."""
  if hasattr(drafter, "draft_topk"):      # a drafter that drafts from the target itself (spec/oracle.py)
    return drafter.draft_topk(target, state, spec.topk)
  b = state.bonus.shape[0]
  bk = spec.block_size
  start = state.cache.lengths
  block = jnp.concatenate([state.bonus[:, None], jnp.full((b, bk - 1), spec.mask_token_id, jnp.int32)], axis=1)
  positions = start[:, None] + jnp.arange(bk, dtype=jnp.int32)[None, :]
  hidden = drafter(target.embed(block), positions, state.drafter_cache)            # [B, Bk, D]
  logits = target.head(hidden[:, 1:])                                               # [B, L, V] fp32
  from ddtree_jax import vocab_parallel
  if vocab_parallel.applies(getattr(target, "mesh", None), logits.shape[-1]):   # from vocabulary shards
    return vocab_parallel.top_k_logprobs(logits, spec.topk, target.mesh)
  from ddtree_jax import sharding     # top_k per data group (XLA would gather the [B, L, V] logits over "data")
  logp = jax.nn.log_softmax(logits, axis=-1)
  # top_k: lax.top_k's result, in two stages where that is faster (ddtree_jax/topk.py: GPU, few rows)
  return sharding.per_data_group(lambda lp: top_k(lp, spec.topk), getattr(target, "mesh", None), logp)


def speculative_round(target, drafter, state: GenerationState, spec: RoundSpec) -> GenerationState:
  b = state.bonus.shape[0]
  bk, n = spec.block_size, spec.budget
  start = state.cache.lengths
  active = ~state.done
  top_lp, top_tok = draft_distributions(target, drafter, state, spec)
  tree = build_tree(top_lp, top_tok, n, root_tokens=state.bonus)
  expected = state.expected
  if expected is not None and spec.auto_budgets:
    from ddtree_jax.spec.auto_budget import update_expected
    expected = update_expected(expected, tree.scores, tree.valid, active, spec.auto_budgets)
  tokens = jnp.where(tree.valid, tree.tokens, 0)
  positions = start[:, None] + tree.depths
  mask = (tree.ancestors & tree.valid[:, None, :]) | jnp.eye(n + 1, dtype=bool)[None]
  out = target(tokens, positions, state.cache, mask, feature_layers=spec.feature_layers)
  key, sub = jax.random.split(state.key)
  target_tokens = choose_tokens(out.logits, sub, spec.sampling, getattr(target, "mesh", None))   # [B, N+1]
  path, n_acc, bonus = walk_tree(tokens, tree.parents, tree.valid, target_tokens, bk - 1)
  # Emitted this round: the accepted nodes' tokens, then the bonus (n_acc tokens in all).
  path_tokens = jnp.take_along_axis(tokens, path, axis=1)                          # [B, Bk]
  shifted = jnp.concatenate([path_tokens[:, 1:], jnp.zeros((b, 1), jnp.int32)], axis=1)
  i = jnp.arange(bk)[None, :]
  emit = jnp.where(i == (n_acc - 1)[:, None], bonus[:, None], shifted)
  committed = jnp.where(active, n_acc, 0)
  cache = LatentCache(
      ckv=tuple(compact_block(c, start, path, n + 1) for c in out.cache.ckv),
      kpe=tuple(compact_block(c, start, path, n + 1) for c in out.cache.kpe),
      lengths=start + committed)
  feats = jnp.take_along_axis(out.features, path[:, :, None], axis=1)              # [B, Bk, K*D]
  dcache = drafter.append_context(feats, start[:, None] + i.astype(jnp.int32), committed, state.drafter_cache)
  state = dataclasses.replace(state, cache=cache, drafter_cache=dcache, key=key,
                              bonus=jnp.where(active, bonus, state.bonus), expected=expected)
  lp = None
  if state.logprobs is not None:    # emitted token i is the target's choice at the i-th node of the path
    lp = token_logprobs(jnp.take_along_axis(out.logits, path[:, :, None], axis=1), emit)     # [B, Bk]
  state, _ = emit_tokens(state, emit, n_acc, lp)
  return state
