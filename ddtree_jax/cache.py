"""The target's latent KV cache: normalised c_kv (kv_lora_rank) + roped k_pe (qk_rope_head_dim) per
token per layer, shared by all heads (MLA). At K2.6 scale: 61 layers x 576 values x 2 bytes = 70,272 B/token.

Convention: positions [0, lengths[b]) are committed. A forward over a block of T tokens writes their
latents at [lengths[b], lengths[b] + T) and attends to them under a block mask; committing then either
advances `lengths` (prefill / AR) or compacts the accepted tree path to contiguous positions.
The buffer must hold max committed length + the largest block: writes past the end are an error
upstream (dynamic_update_slice would clamp them silently), which `LatentCache.capacity` lets callers check.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class LatentCache:
  ckv: tuple       # per layer: [B, S, R]
  kpe: tuple       # per layer: [B, S, P]
  lengths: jax.Array  # [B] int32, committed tokens per sequence

  @property
  def capacity(self) -> int:
    return self.ckv[0].shape[1]

  @property
  def batch(self) -> int:
    return self.lengths.shape[0]


def init_latent_cache(num_layers: int, batch: int, capacity: int, kv_lora_rank: int, rope_dim: int,
                      dtype=jnp.bfloat16) -> LatentCache:
  return LatentCache(
      ckv=tuple(jnp.zeros((batch, capacity, kv_lora_rank), dtype) for _ in range(num_layers)),
      kpe=tuple(jnp.zeros((batch, capacity, rope_dim), dtype) for _ in range(num_layers)),
      lengths=jnp.zeros((batch,), jnp.int32),
  )


def write_rows(buf, rows, start):
  """buf: [B, S, X]; rows: [B, T, X]; start: [B] -> buf with rows at [start[b], start[b] + T)."""
  def one(b_buf, b_rows, b_start):
    return jax.lax.dynamic_update_slice(b_buf, b_rows.astype(b_buf.dtype), (b_start, 0))
  return jax.vmap(one)(buf, rows, start)


def read_rows(buf, start, length: int):
  """buf: [B, S, X]; start: [B] -> [B, length, X] rows [start[b], start[b] + length)."""
  def one(b_buf, b_start):
    return jax.lax.dynamic_slice(b_buf, (b_start, 0), (length, b_buf.shape[1]))
  return jax.vmap(one)(buf, start)


def compact_block(buf, start, src, block_len: int):
  """Moves block rows to contiguous positions.

  buf: [B, S, X]; start: [B]; src: [B, L] int32 indices into the block [0, block_len).
  Row start + i receives the old row start + src[:, i], for i < L (all reads happen before writes).
  """
  block = read_rows(buf, start, block_len)                          # [B, block_len, X]
  moved = jnp.take_along_axis(block, src[:, :, None], axis=1)       # [B, L, X]
  return write_rows(buf, moved, start)
