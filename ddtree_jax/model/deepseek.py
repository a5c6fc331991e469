"""The DeepSeek-V3 / Kimi K2.x target model in Flax NNX."""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from ddtree_jax.cache import LatentCache
from ddtree_jax.config import ModelConfig
from ddtree_jax.model.mla import MLA
from ddtree_jax.model.mlp import SwiGLU
from ddtree_jax.model.moe import MoE
from ddtree_jax.model.norm import RMSNorm
from ddtree_jax.model.rope import rope_cos_sin, yarn_inv_freq


class DecoderLayer(nnx.Module):
  def __init__(self, cfg: ModelConfig, index: int, *, dtype, rngs: nnx.Rngs):
    self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype=dtype)
    self.self_attn = MLA(cfg, dtype=dtype, rngs=rngs)
    self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype=dtype)
    self.mlp = (MoE(cfg, dtype=dtype, rngs=rngs) if cfg.is_moe_layer(index)
                else SwiGLU(cfg.hidden_size, cfg.intermediate_size, dtype=dtype, rngs=rngs))

  def __call__(self, x, cos, sin, ckv, kpe, cache_len, block_mask, absorbed):
    a, ckv, kpe = self.self_attn(self.input_layernorm(x), cos, sin, ckv, kpe, cache_len, block_mask,
                                 absorbed=absorbed)
    h = x + a
    return h + self.mlp(self.post_attention_layernorm(h)), ckv, kpe


@dataclasses.dataclass
class ForwardOutput:
  logits: jax.Array          # [B, T, V] fp32
  cache: LatentCache          # block latents written at [lengths, lengths + T); lengths unchanged
  features: jax.Array | None  # [B, T, len(feature_layers) * D]: hidden states after those layers
  hidden: jax.Array | None = None  # [B, T, D]: the last layer's output before the final norm (unused
                                   # logits rows are then dead code: the prefill reads one row per sequence)


class DeepseekV3(nnx.Module):
  def __init__(self, cfg: ModelConfig, *, dtype=jnp.bfloat16, rngs: nnx.Rngs):
    self.cfg = cfg
    self.dtype = dtype
    self.embed_tokens = nnx.Embed(cfg.vocab_size, cfg.hidden_size, dtype=dtype, param_dtype=dtype,
                                  embedding_init=nnx.initializers.normal(0.02), rngs=rngs)
    self.layers = nnx.List([DecoderLayer(cfg, i, dtype=dtype, rngs=rngs) for i in range(cfg.num_hidden_layers)])
    self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype=dtype)
    self.lm_head = nnx.Linear(cfg.hidden_size, cfg.vocab_size, use_bias=False, dtype=dtype, param_dtype=dtype,
                              kernel_init=nnx.initializers.normal(0.02), rngs=rngs)
    inv_freq, mult = yarn_inv_freq(cfg.qk_rope_head_dim, cfg.rope_theta, cfg.rope_scaling)
    self.inv_freq = nnx.data(jnp.asarray(inv_freq, jnp.float32))   # constant, not a parameter
    self.rope_multiplier = float(mult)
    self.mesh = None   # a jax.sharding.Mesh when the program runs on one (sharding.with_mesh)

  def embed(self, tokens):
    return self.embed_tokens(tokens)

  def head(self, x):
    """The lm_head with fp32 accumulation and output: x [..., D] (already normalised) -> [..., V].
    Rounding logits to bf16 would turn near-ties into exact ties that the AR step and the tree verify
    (different shapes, different reduction orders) could break differently."""
    return jnp.einsum("...d,dv->...v", x, self.lm_head.kernel[...], preferred_element_type=jnp.float32)

  def logits(self, hidden):
    """hidden: [..., D] (before the final norm) -> fp32 logits [..., V]."""
    return self.head(self.norm(hidden))

  def __call__(self, tokens, positions, cache: LatentCache, block_mask, *, feature_layers=(),
               absorbed: bool = True) -> ForwardOutput:
    """tokens, positions: [B, T] int32; block_mask: [B, T, T] bool (causal for prefill, ancestor-only
    for a tree). Attends to the committed cache [0, cache.lengths) plus the block."""
    from ddtree_jax.sharding import constrain_batch
    x = constrain_batch(self.embed(tokens), self.mesh)   # residual stream: replicated over "model"
    cos, sin = rope_cos_sin(positions, self.inv_freq, self.rope_multiplier)
    ckv, kpe, feats = list(cache.ckv), list(cache.kpe), []
    wanted = set(feature_layers)
    for i, layer in enumerate(self.layers):
      x, ckv[i], kpe[i] = layer(x, cos, sin, ckv[i], kpe[i], cache.lengths, block_mask, absorbed)
      x = constrain_batch(x, self.mesh)
      if i in wanted:
        feats.append(x)
    by_layer = dict(zip(sorted(wanted), feats))
    features = jnp.concatenate([by_layer[i] for i in feature_layers], axis=-1) if feature_layers else None
    new_cache = LatentCache(ckv=tuple(ckv), kpe=tuple(kpe), lengths=cache.lengths)
    return ForwardOutput(logits=self.logits(x), cache=new_cache, features=features, hidden=x)
