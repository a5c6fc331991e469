"""The prefill, in chunks: the prompt goes through the target `chunk` tokens at a time.

Each chunk is one forward of the expanded MLA over [B, C] tokens that attends to the prompt already
cached, [0, start), plus itself causally, so its fp32 scores are [B, C, heads, capacity] instead of
[B, P, heads, capacity] for the whole prompt. One compiled program serves every chunk of every prompt
length within one cache-capacity bucket (the chunk's start is a runtime value; the last chunk is padded;
the capacity grows with prompt + max_new_tokens in steps of 128), a second tiny one emits the first token. Ragged batches: all rows share the chunk grid; row b's tokens at or past prompt_len[b] are
padding, whose outputs are never read and whose cache rows lie past the committed length.

A chunk writes the target latents and the drafter context entries of its C tokens (the features of the
drafter's target layers, exactly the rows a one-shot prefill would append) and, for the rows whose
last prompt token lies in it, chooses the first generated token into `bonus` with the subkey that
`prefill_finish` then consumes, so a chunked prefill gives the one-shot prefill's tokens at T > 0 too.
"""
from __future__ import annotations

import dataclasses
import math
import operator
from typing import Optional

import jax
import jax.numpy as jnp

from ddtree_jax.sampling import choose_tokens, token_logprobs
from ddtree_jax.spec.state import GenerationState, emit_tokens

DEFAULT_CHUNK = 512   # K2.6 at 128K context on 8 x 96 GB fits with this (benchmarks/RESULTS.md, "Sharding")


def check_chunk(value, name: str = "prefill_chunk") -> Optional[int]:
  """The chunk size as given by a user: an integer >= 0 or None; 0 and None mean one shot (None back)."""
  if value is None:
    return None
  try:
    if isinstance(value, bool):
      raise TypeError
    value = operator.index(value)
  except TypeError:
    raise ValueError(f"{name}={value!r}: expected an integer >= 0 (0 = the whole prompt in one forward)") from None
  if value < 0:
    raise ValueError(f"{name}={value}: must be >= 0 (0 = the whole prompt in one forward)")
  return value or None


def chunk_layout(prompt_tokens: int, chunk: Optional[int]) -> tuple[int, int]:
  """(chunk length C, number of chunks n) for prompts padded to `prompt_tokens`: C = the whole padded
  prompt when it is no longer than `chunk` (or chunk is None), else `chunk`; n * C >= prompt_tokens."""
  c = prompt_tokens if not chunk or chunk >= prompt_tokens else chunk
  return c, math.ceil(prompt_tokens / c)


def prefill_chunk(target, drafter, state: GenerationState, tokens, start, prompt_len, spec) -> GenerationState:
  """tokens: [B, C] int32, the prompt tokens [start, start + C) (right-padded); start: [B] int32, the
  same chunk offset in every row; prompt_len: [B]. Writes both caches' rows [start, start + C) and
  sets `bonus` for the rows whose last prompt token is in this chunk."""
  b, c = tokens.shape
  j = jnp.arange(c, dtype=jnp.int32)
  positions = start[:, None] + j[None, :]                                          # [B, C]
  valid = positions < prompt_len[:, None]                                          # [B, C] real tokens
  causal = (j[None, :] <= j[:, None])[None] & valid[:, None, :]                   # [B, C, C]
  mask = causal | jnp.eye(c, dtype=bool)[None]
  cache = dataclasses.replace(state.cache, lengths=start)
  out = target(tokens, positions, cache, mask, feature_layers=spec.feature_layers, absorbed=False)
  last = prompt_len - 1 - start                                                    # [B] index in the chunk
  here = (last >= 0) & (last < c)
  hidden = jnp.take_along_axis(out.hidden, jnp.clip(last, 0, c - 1)[:, None, None], axis=1)[:, 0]   # [B, D]
  _, sub = jax.random.split(state.key)            # the key itself advances once, in prefill_finish
  logits = target.logits(hidden)                                                    # [B, V]
  first = choose_tokens(logits, sub, spec.sampling, getattr(target, "mesh", None))   # [B]
  logprobs = state.logprobs
  if logprobs is not None:       # the first token's, emitted (out[:, 0]) by prefill_finish
    logprobs = logprobs.at[:, 0].set(jnp.where(here, token_logprobs(logits, first), logprobs[:, 0]))
  dcache = state.drafter_cache
  if drafter is not None:
    dcache = dataclasses.replace(dcache, lengths=jnp.minimum(prompt_len, start).astype(jnp.int32))
    dcache = drafter.append_context(out.features, positions, jnp.clip(prompt_len - start, 0, c), dcache)
  return dataclasses.replace(state, cache=out.cache, drafter_cache=dcache,
                             bonus=jnp.where(here, first, state.bonus), logprobs=logprobs)


def prefill_finish(state: GenerationState, prompt_len) -> GenerationState:
  """After the last chunk: commits the prompt (lengths = prompt_len), advances the key, emits `bonus`
  as the first generated token. The prefill is not a speculative round: it is not counted as one."""
  b = prompt_len.shape[0]
  key, _ = jax.random.split(state.key)
  state = dataclasses.replace(state, cache=dataclasses.replace(state.cache, lengths=prompt_len.astype(jnp.int32)),
                              key=key)
  state, _ = emit_tokens(state, state.bonus[:, None], jnp.ones((b,), jnp.int32))
  return dataclasses.replace(state, rounds=jnp.zeros_like(state.rounds), per_round=jnp.zeros_like(state.per_round))
