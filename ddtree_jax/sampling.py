"""Choosing the target's token from logits: greedy (temperature 0) or a sample from the
temperature / top-k / top-p filtered distribution. The same rule serves AR decoding and the tree
walk, which is what makes speculative decoding lossless."""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from ddtree_jax.topk import top_k


@dataclasses.dataclass(frozen=True)
class SamplingParams:
  temperature: float = 0.0   # 0 = greedy
  top_p: float = 1.0         # in (0, 1]
  top_k: int = 0             # 0 = no top-k filter

  def validate(self) -> "SamplingParams":
    if not self.temperature >= 0.0:
      raise ValueError(f"temperature must be >= 0, got {self.temperature}")
    if not 0.0 < self.top_p <= 1.0:
      raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
    if self.top_k < 0:
      raise ValueError(f"top_k must be >= 0, got {self.top_k}")
    return self

  @property
  def greedy(self) -> bool:
    return self.temperature == 0.0


def filtered_logits(logits, params: SamplingParams):
  """logits: [..., V] fp32 -> logits/T with entries outside top-k / top-p set to -inf."""
  x = logits.astype(jnp.float32) / params.temperature
  v = x.shape[-1]
  if params.top_k and params.top_k < v:
    kth = top_k(x, params.top_k)[0][..., -1:]                 # lax.top_k's values (ddtree_jax/topk.py)
    x = jnp.where(x < kth, -jnp.inf, x)
  if params.top_p < 1.0:
    sorted_x = jnp.sort(x, axis=-1)[..., ::-1]
    probs = jax.nn.softmax(sorted_x, axis=-1)
    cum = jnp.cumsum(probs, axis=-1)
    # Keep the smallest prefix whose mass reaches top_p (the first token is always kept).
    keep_sorted = (cum - probs) < params.top_p
    cutoff = jnp.min(jnp.where(keep_sorted, sorted_x, jnp.inf), axis=-1, keepdims=True)
    x = jnp.where(x < cutoff, -jnp.inf, x)
  return x


def choose_tokens(logits, key, params: SamplingParams, mesh=None):
  """logits: [..., V] -> int32 tokens [...]. Independent samples per position.

  With a `mesh` whose "model" axis splits the vocabulary, the decision is taken from the vocabulary
  shards (vocab_parallel.py): the same tokens, without gathering the logits."""
  if mesh is not None:
    from ddtree_jax import vocab_parallel
    if vocab_parallel.applies(mesh, logits.shape[-1]):
      return vocab_parallel.choose_tokens(logits, key, params, mesh)
  if params.greedy:
    return jnp.argmax(logits, axis=-1).astype(jnp.int32)
  from ddtree_jax import sharding   # the filter per data group: XLA would gather the logits for lax.top_k
  x = sharding.per_data_group(lambda l: filtered_logits(l, params), mesh, logits)
  return jax.random.categorical(key, x, axis=-1).astype(jnp.int32)


def token_logprobs(logits, tokens):
  """The model's log-probability of each chosen token: log_softmax(logits)[token], before temperature, top-k and
  top-p (the raw distribution, as `--logprobs` reports it). logits: [..., V]; tokens: int [...] -> fp32 [...].

  Only reductions over V (a max, a sum of exponentials, a masked sum), no gather: logits split over the vocabulary
  ("model" axis) stay split, and each reduction is one all-reduce."""
  x = logits.astype(jnp.float32)
  top = jnp.max(x, axis=-1, keepdims=True)
  log_total = top[..., 0] + jnp.log(jnp.sum(jnp.exp(x - top), axis=-1))
  vocab = jax.lax.broadcasted_iota(jnp.int32, x.shape, x.ndim - 1)
  return jnp.sum(jnp.where(vocab == tokens[..., None], x, 0.0), axis=-1) - log_total
