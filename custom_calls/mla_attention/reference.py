"""Plain-XLA MLA attention in the absorbed form (the oracle and the CPU fallback).

MQA with a 576-dim key (c_kv 512 + k_pe 64) and a 512-dim value (c_kv) shared by all heads.
The caller has already written the latents of the T query tokens into the cache at positions
[cache_len, cache_len + T). Key s is visible to query t of sequence b iff
    s < cache_len[b]                                            (committed context), or
    0 <= s - cache_len[b] < T and block_mask[b, t, s - cache_len[b]]   (the block itself:
                                                                 causal for prefill, ancestor-only for a tree).
"""
import jax.numpy as jnp


def visibility_mask(cache_len, block_mask, num_keys):
  """cache_len: [B] int32; block_mask: [B, T, T] bool -> [B, T, S] bool."""
  b, t, _ = block_mask.shape
  s = jnp.arange(num_keys)[None, None, :]                       # [1, 1, S]
  start = cache_len[:, None, None]                              # [B, 1, 1]
  committed = s < start                                         # [B, 1, S]
  rel = s - start                                               # [B, 1, S]
  in_block = (rel >= 0) & (rel < t)
  rel_c = jnp.clip(rel, 0, t - 1)
  rel_c = jnp.broadcast_to(rel_c, (b, t, num_keys))
  block_vis = jnp.take_along_axis(block_mask, rel_c, axis=2)   # [B, T, S]
  return committed | (in_block & block_vis)


def mla_attention_reference(q_lat, q_pe, ckv, kpe, cache_len, block_mask, *, scale):
  """Absorbed MLA attention.

  q_lat: [B, T, H, R]   queries already multiplied by W_UK (R = kv_lora_rank)
  q_pe:  [B, T, H, P]   roped query part (P = qk_rope_head_dim)
  ckv:   [B, S, R]      normalised latent cache
  kpe:   [B, S, P]      roped shared key part
  cache_len: [B] int32  committed length per sequence
  block_mask: [B, T, T] bool
  returns o_lat: [B, T, H, R] in q_lat's dtype (softmax and accumulation in fp32)
  """
  f32 = jnp.float32
  scores = jnp.einsum("bthr,bsr->bths", q_lat.astype(f32), ckv.astype(f32))
  scores += jnp.einsum("bthp,bsp->bths", q_pe.astype(f32), kpe.astype(f32))
  scores *= scale
  vis = visibility_mask(cache_len, block_mask, ckv.shape[1])[:, :, None, :]  # [B, T, 1, S]
  scores = jnp.where(vis, scores, -jnp.inf)
  # Every query sees at least itself when block_mask has a true diagonal; guard fully masked rows
  # (padding queries) so that they produce zeros instead of NaN.
  row_max = jnp.max(scores, axis=-1, keepdims=True)
  row_max = jnp.where(jnp.isfinite(row_max), row_max, 0.0)
  p = jnp.exp(scores - row_max)
  denom = jnp.sum(p, axis=-1, keepdims=True)
  p = p / jnp.where(denom > 0, denom, 1.0)
  o = jnp.einsum("bths,bsr->bthr", p, ckv.astype(f32))
  return o.astype(q_lat.dtype)
