"""The DFlash drafter's KV cache of context entries (keys already k_norm'ed and roped).

Convention: entries [0, lengths[b]) are the context of sequence b (features of committed tokens,
projected by every drafter layer's k_proj/v_proj). `DFlashDrafter.append_context` writes a chunk of C
rows at lengths[b] and advances lengths by the chunk's valid count; rows past lengths are garbage,
never attended, and overwritten by the next append. The buffer must hold the longest context plus
one chunk (dynamic_update_slice clamps writes past the end silently); check with `capacity`.
Block (draft) entries are never cached: they are recomputed each round.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from ddtree_jax.config import DFlashConfig


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class DrafterCache:
  k: tuple            # per layer: [B, S, KVH, hd]
  v: tuple            # per layer: [B, S, KVH, hd]
  lengths: jax.Array  # [B] int32 context entries per sequence

  @property
  def capacity(self) -> int:
    return self.k[0].shape[1]

  @property
  def batch(self) -> int:
    return self.lengths.shape[0]


def init_drafter_cache(cfg: DFlashConfig, batch: int, capacity: int, dtype=jnp.bfloat16) -> DrafterCache:
  shape = (batch, capacity, cfg.num_key_value_heads, cfg.head_dim)
  return DrafterCache(
      k=tuple(jnp.zeros(shape, dtype) for _ in range(cfg.num_hidden_layers)),
      v=tuple(jnp.zeros(shape, dtype) for _ in range(cfg.num_hidden_layers)),
      lengths=jnp.zeros((batch,), jnp.int32),
  )
