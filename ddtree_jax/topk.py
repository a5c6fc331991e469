"""Exact top-k over the last axis in two stages: the top-k of each chunk of the axis, then the top-k of those
candidates. Equal to `jax.lax.top_k` (values and indices, ties included: among equal values the lower index
first), because every element of the overall top-k is in its chunk's top-k, the candidates keep chunk order, and
lax.top_k breaks ties by position in both stages.

Why: on the GPU, XLA ran the drafter's top-K over the vocabulary ([B, block - 1, V], K = min(N, V)) as one sort
kernel over those few long rows: 32 us of a ~0.9-ms DDTree round of the embedded model on the H200 for
[1, 15, 4096], K = 32 (issue 6 fourteenth round, call 7's trace). Chunking first makes B x 15 x V / chunk short
rows, which spread over the chip (call 8: 38 -> 23 us with the harness; see default_chunk). The sampling filter's
top-k (sampling.filtered_logits, vocab_parallel) goes through here too.
"""
from __future__ import annotations

import math
from typing import Optional

import jax
import jax.numpy as jnp


def top_k(x: jax.Array, k: int, *, chunk: Optional[int] = None) -> tuple[jax.Array, jax.Array]:
  """(values, int32 indices) of the k largest entries of x's last axis, as jax.lax.top_k(x, k).

  chunk: entries per first-stage row (None: default_chunk). One stage (lax.top_k itself) when chunking does
  not apply: chunk None / >= the axis, not dividing it, or smaller than k."""
  v = x.shape[-1]
  if not 1 <= k <= v:
    raise ValueError(f"top_k: k = {k} must be in [1, {v}] (the last axis of x {x.shape})")
  lead = x.shape[:-1]
  chunk = default_chunk(v, k, math.prod(lead)) if chunk is None else chunk
  if chunk is None or chunk >= v or v % chunk or chunk < k:
    return jax.lax.top_k(x, k)
  n_chunks = v // chunk
  vals, idx = jax.lax.top_k(x.reshape(*lead, n_chunks, chunk), k)             # [..., C, k] each
  idx = idx + (jnp.arange(n_chunks, dtype=idx.dtype) * chunk)[:, None]
  vals, pos = jax.lax.top_k(vals.reshape(*lead, n_chunks * k), k)             # candidates in chunk order
  return vals, jnp.take_along_axis(idx.reshape(*lead, n_chunks * k), pos, axis=-1)


# Chunking pays for a few short-K rows (H200, issue 6 fourteenth round, call 8, us with a 7-11 us harness; lax.top_k
# -> chunks of 512): [1, 15, 4096] K 8 / 32 / 64: 27 / 38 / 57 -> 16 / 23 / 19; [1, 15, 20480] (a K2.6 vocabulary
# shard) 51 / 99 / 71 -> 30 / 35 / 45; [1, 15, 163840] K 8 / 32: 160 / 496 -> 122 / 171. Not at 120 rows
# ([8, 15, 4096]: 27 / 39 / 44 -> 33 / 34 / 42) nor at K 256 (38 -> 28 at 4096, but 72 -> 86 at 20480).
CHUNK = 512
MAX_ROWS = 64
MAX_K = 64


def default_chunk(v: int, k: int, rows: int = 1, backend: Optional[str] = None) -> Optional[int]:
  """The first stage's row length for `rows` rows of v entries and a top-k of k on `backend` (None: JAX's default
  backend): CHUNK, or None (one stage) for long K, many rows, short rows, and off the GPU (XLA's CPU top-k does
  not sort the row, and two stages were slower there)."""
  if (backend or jax.default_backend()) != "gpu" or k > MAX_K or rows > MAX_ROWS or v <= 2 * CHUNK:
    return None
  return CHUNK if v % CHUNK == 0 else None
