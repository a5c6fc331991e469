"""The DFlash block-diffusion drafter (REFERENCE.md section 2): a small Qwen3-style decoder with KV injection.

- Context: target hidden states after `target_layer_ids`, concatenated on features ->
  h_ctx = hidden_norm(fc(concat)) [.., D]. In every layer l the context keys/values are
  k_norm(k_proj_l(h_ctx)) roped at the context positions and v_proj_l(h_ctx). As in the public DFlash
  reference (z-lab/dflash, `Qwen3DFlashAttention`), h_ctx goes to k_proj/v_proj directly: the layer's
  input_layernorm normalises only the block's hidden states, and h_ctx is the same for all layers.
- Block: [bonus, MASK x (Bk-1)] embedded with the target's embed_tokens by the caller, positions
  start..start+Bk-1. Queries from the block only (q_norm, RoPE); keys/values = context ++ block (same
  projections, k_norm, RoPE); no causal mask: the block sees itself bidirectionally and all valid context.
  GQA with num_key_value_heads. Output: norm(hidden); the caller applies the target's lm_head.
- RoPE: Qwen3 rotate-half with the drafter's own rope_theta / YaRN (model/qwen3_rope.py).

Inference keeps the context K/V in a `DrafterCache` (`append_context`), and `__call__` drafts one block
without touching the cache. Training (`forward_train`) runs many blocks of one sequence at once, block j
seeing context positions < anchor[j] and only itself; it computes the same function as
append_context + __call__ for each block.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from ddtree_jax.cache import write_rows
from ddtree_jax.config import DFlashConfig
from ddtree_jax.drafter_cache import DrafterCache
from ddtree_jax.model.mlp import SwiGLU
from ddtree_jax.model.norm import RMSNorm
from ddtree_jax.model.qwen3_rope import apply_rope_half, qwen3_rope_params, rope_cos_sin_half


def _linear(din, dout, dtype, rngs):
  return nnx.Linear(din, dout, use_bias=False, dtype=dtype, param_dtype=dtype,
                    kernel_init=nnx.initializers.normal(0.02), rngs=rngs)


def block_attention(q, k_ctx, v_ctx, ctx_mask, k_blk, v_blk, scale):
  """Attention of blocks over (their visible context) ++ (themselves, bidirectional).

  q: [B, nb, Bk, H, hd]; k_ctx, v_ctx: [B, S, KVH, hd]; ctx_mask: [B, nb, S] bool (context entry s is
  visible to block j); k_blk, v_blk: [B, nb, Bk, KVH, hd]. Returns [B, nb, Bk, H, hd] in q's dtype.
  Scores in fp32. A block never attends to another block, so the cost is nb*Bk*(S + Bk), not (nb*Bk)^2.
  """
  b, nb, bk, h, hd = q.shape
  kvh = k_ctx.shape[2]
  g = h // kvh
  qg = q.reshape(b, nb, bk, kvh, g, hd)
  s_ctx = jnp.einsum("bnqkgd,bskd->bnkgqs", qg, k_ctx, preferred_element_type=jnp.float32) * scale
  s_blk = jnp.einsum("bnqkgd,bnpkd->bnkgqp", qg, k_blk, preferred_element_type=jnp.float32) * scale
  s_ctx = jnp.where(ctx_mask[:, :, None, None, None, :], s_ctx, -jnp.inf)
  s = s_ctx.shape[-1]
  p = jax.nn.softmax(jnp.concatenate([s_ctx, s_blk], axis=-1), axis=-1)   # block keys always visible
  p_ctx, p_blk = p[..., :s].astype(v_ctx.dtype), p[..., s:].astype(v_blk.dtype)
  o = (jnp.einsum("bnkgqs,bskd->bnqkgd", p_ctx, v_ctx, preferred_element_type=jnp.float32)
       + jnp.einsum("bnkgqp,bnpkd->bnqkgd", p_blk, v_blk, preferred_element_type=jnp.float32))
  return o.reshape(b, nb, bk, h, hd).astype(q.dtype)


class DFlashAttention(nnx.Module):
  def __init__(self, cfg: DFlashConfig, *, dtype, rngs: nnx.Rngs):
    self.num_heads = cfg.num_attention_heads
    self.num_kv_heads = cfg.num_key_value_heads
    self.head_dim = cfg.head_dim
    d, hd = cfg.hidden_size, cfg.head_dim
    self.q_proj = _linear(d, cfg.num_attention_heads * hd, dtype, rngs)
    self.k_proj = _linear(d, cfg.num_key_value_heads * hd, dtype, rngs)
    self.v_proj = _linear(d, cfg.num_key_value_heads * hd, dtype, rngs)
    self.o_proj = _linear(cfg.num_attention_heads * hd, d, dtype, rngs)
    self.q_norm = RMSNorm(hd, cfg.rms_norm_eps, dtype=dtype)
    self.k_norm = RMSNorm(hd, cfg.rms_norm_eps, dtype=dtype)

  def keys_values(self, x, cos, sin):
    """x: [..., T, D]; cos/sin: [..., T, hd/2] -> k, v: [..., T, KVH, hd] (k normed and roped)."""
    lead = x.shape[:-1]
    k = self.k_norm(self.k_proj(x).reshape(*lead, self.num_kv_heads, self.head_dim))
    k = apply_rope_half(k, cos[..., None, :], sin[..., None, :])
    v = self.v_proj(x).reshape(*lead, self.num_kv_heads, self.head_dim)
    return k, v

  def queries(self, x, cos, sin):
    lead = x.shape[:-1]
    q = self.q_norm(self.q_proj(x).reshape(*lead, self.num_heads, self.head_dim))
    return apply_rope_half(q, cos[..., None, :], sin[..., None, :])

  def __call__(self, x, cos, sin, k_ctx, v_ctx, ctx_mask):
    """x: [B, nb, Bk, D] (normed block states); cos/sin: [B, nb, Bk, hd/2]; k_ctx/v_ctx: [B, S, KVH, hd];
    ctx_mask: [B, nb, S] -> [B, nb, Bk, D]."""
    q = self.queries(x, cos, sin)
    k_blk, v_blk = self.keys_values(x, cos, sin)
    o = block_attention(q, k_ctx, v_ctx, ctx_mask, k_blk, v_blk, self.head_dim ** -0.5)
    return self.o_proj(o.reshape(*x.shape[:-1], self.num_heads * self.head_dim))


class DFlashLayer(nnx.Module):
  def __init__(self, cfg: DFlashConfig, *, dtype, rngs: nnx.Rngs):
    self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype=dtype)
    self.self_attn = DFlashAttention(cfg, dtype=dtype, rngs=rngs)
    self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype=dtype)
    self.mlp = SwiGLU(cfg.hidden_size, cfg.intermediate_size, dtype=dtype, rngs=rngs)

  def __call__(self, x, cos, sin, k_ctx, v_ctx, ctx_mask):
    h = x + self.self_attn(self.input_layernorm(x), cos, sin, k_ctx, v_ctx, ctx_mask)
    return h + self.mlp(self.post_attention_layernorm(h))


class DFlashDrafter(nnx.Module):
  def __init__(self, cfg: DFlashConfig, *, dtype=jnp.bfloat16, rngs: nnx.Rngs):
    self.cfg = cfg
    self.dtype = dtype
    k = len(cfg.target_layer_ids)
    self.layers = nnx.List([DFlashLayer(cfg, dtype=dtype, rngs=rngs) for _ in range(cfg.num_hidden_layers)])
    self.fc = _linear(k * cfg.hidden_size, cfg.hidden_size, dtype, rngs)
    self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype=dtype)
    self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype=dtype)
    inv_freq, factor = qwen3_rope_params(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling)
    self.inv_freq = nnx.data(jnp.asarray(inv_freq, jnp.float32))   # constant, not a parameter
    self.attention_factor = float(factor)

  # ---- pieces ----------------------------------------------------------------------------------
  def _cos_sin(self, positions):
    return rope_cos_sin_half(positions, self.inv_freq, self.attention_factor)

  def context_hidden(self, features):
    """features: [..., K*D] target hidden states (concatenated) -> hidden_norm(fc(.)) [..., D]."""
    return self.hidden_norm(self.fc(features.astype(self.dtype)))

  def context_kv(self, features, positions):
    """features: [B, C, K*D]; positions: [B, C] -> per layer (k, v) [B, C, KVH, hd]."""
    h = self.context_hidden(features)
    cos, sin = self._cos_sin(positions)
    return [layer.self_attn.keys_values(h, cos, sin) for layer in self.layers]

  def _blocks(self, x, positions, kv_ctx, ctx_mask):
    """x: [B, nb, Bk, D]; positions: [B, nb, Bk]; kv_ctx: per layer (k, v) [B, S, KVH, hd];
    ctx_mask: [B, nb, S] -> norm(hidden) [B, nb, Bk, D]."""
    cos, sin = self._cos_sin(positions)
    for layer, (k, v) in zip(self.layers, kv_ctx):
      x = layer(x, cos, sin, k, v, ctx_mask)
    return self.norm(x)

  # ---- inference -------------------------------------------------------------------------------
  def append_context(self, features, positions, n_valid, cache: DrafterCache) -> DrafterCache:
    """features: [B, C, K*D]; positions: [B, C] int32; n_valid: [B] int32 (<= C).

    Writes all C rows at cache.lengths[b] and advances lengths by n_valid[b]: the rows past n_valid
    lie beyond the new length (never attended, overwritten by the next append)."""
    kv = self.context_kv(features, positions)
    b, c = positions.shape
    ks, vs = [], []
    for (k, v), kc, vc in zip(kv, cache.k, cache.v):
      s = kc.shape[1]
      ks.append(write_rows(kc.reshape(b, s, -1), k.reshape(b, c, -1), cache.lengths).reshape(kc.shape))
      vs.append(write_rows(vc.reshape(b, s, -1), v.reshape(b, c, -1), cache.lengths).reshape(vc.shape))
    return DrafterCache(k=tuple(ks), v=tuple(vs), lengths=cache.lengths + n_valid.astype(jnp.int32))

  def __call__(self, block_embeds, block_positions, cache: DrafterCache):
    """block_embeds: [B, Bk, D] (target embeddings of [bonus, MASK...]); block_positions: [B, Bk] int32
    -> norm(hidden) [B, Bk, D]. Attends to cache entries [0, lengths) and the whole block; the cache
    is not modified."""
    s = cache.capacity
    ctx_mask = (jnp.arange(s)[None, :] < cache.lengths[:, None])[:, None, :]      # [B, 1, S]
    out = self._blocks(block_embeds[:, None].astype(self.dtype), block_positions[:, None],
                       list(zip(cache.k, cache.v)), ctx_mask)
    return out[:, 0]

  # ---- training --------------------------------------------------------------------------------
  def forward_train(self, block_embeds, block_positions, ctx_hidden_features, ctx_positions, anchor):
    """Many blocks of one sequence in parallel.

    block_embeds: [B, nb, Bk, D]; block_positions: [B, nb, Bk]; ctx_hidden_features: [B, S, K*D]
    (target features of the sequence); ctx_positions: [B, S] int32 (use a position no anchor exceeds,
    e.g. a large value, for padding); anchor: [B, nb] int32. Block j sees context entries with
    ctx_positions < anchor[:, j] (features of tokens strictly before its anchor) and itself, never
    other blocks. Returns norm(hidden) [B, nb, Bk, D]."""
    kv = self.context_kv(ctx_hidden_features, ctx_positions)
    ctx_mask = ctx_positions[:, None, :] < anchor[:, :, None]                    # [B, nb, S]
    return self._blocks(block_embeds.astype(self.dtype), block_positions, kv, ctx_mask)
