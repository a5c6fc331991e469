"""Multi-head latent attention (MLA) of DeepSeek-V3.

Two computations of the same function:
- expanded (prefill): per-head keys/values are reconstructed from the latent with kv_b_proj;
- absorbed (decode / tree verify): W_UK is folded into the query and W_UV into the output, so the
  attention is MQA over the 576-dim latent keys and 512-dim latent values (custom_calls.mla_attention).
Both read the same latent cache and the same visibility rule (see custom_calls/mla_attention/reference.py).
"""
import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import PartitionSpec as P

import custom_calls
from custom_calls.mla_attention import visibility_mask
from ddtree_jax.cache import write_rows
from ddtree_jax.config import ModelConfig
from ddtree_jax.model.norm import RMSNorm
from ddtree_jax.model.rope import apply_rope_interleaved


def _linear(din, dout, dtype, rngs):
  return nnx.Linear(din, dout, use_bias=False, dtype=dtype, param_dtype=dtype,
                    kernel_init=nnx.initializers.normal(0.02), rngs=rngs)


class MLA(nnx.Module):
  def __init__(self, cfg: ModelConfig, *, dtype, rngs: nnx.Rngs):
    self.cfg = cfg
    h, d = cfg.num_attention_heads, cfg.hidden_size
    if cfg.q_lora_rank:
      self.q_a_proj = _linear(d, cfg.q_lora_rank, dtype, rngs)
      self.q_a_layernorm = RMSNorm(cfg.q_lora_rank, cfg.latent_norm_eps, dtype=dtype)
      self.q_b_proj = _linear(cfg.q_lora_rank, h * cfg.qk_head_dim, dtype, rngs)
    else:
      self.q_proj = _linear(d, h * cfg.qk_head_dim, dtype, rngs)
    self.kv_a_proj_with_mqa = _linear(d, cfg.kv_lora_rank + cfg.qk_rope_head_dim, dtype, rngs)
    self.kv_a_layernorm = RMSNorm(cfg.kv_lora_rank, cfg.latent_norm_eps, dtype=dtype)
    self.kv_b_proj = _linear(cfg.kv_lora_rank, h * (cfg.qk_nope_head_dim + cfg.v_head_dim), dtype, rngs)
    self.o_proj = _linear(h * cfg.v_head_dim, d, dtype, rngs)
    self.mesh = None   # a jax.sharding.Mesh when the program runs on one (sharding.with_mesh)

  def _queries(self, x, cos, sin):
    cfg = self.cfg
    b, t, _ = x.shape
    if cfg.q_lora_rank:
      q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
    else:
      q = self.q_proj(x)
    q = q.reshape(b, t, cfg.num_attention_heads, cfg.qk_head_dim)
    q_nope, q_pe = q[..., :cfg.qk_nope_head_dim], q[..., cfg.qk_nope_head_dim:]
    q_pe = apply_rope_interleaved(q_pe, cos[:, :, None, :], sin[:, :, None, :])
    return q_nope, q_pe                                      # [B,T,H,nope], [B,T,H,rope]

  def latents(self, x, cos, sin):
    """x: [B, T, D] -> c_kv [B, T, R] (normalised), k_pe [B, T, P] (roped)."""
    cfg = self.cfg
    kv = self.kv_a_proj_with_mqa(x)
    c_kv = self.kv_a_layernorm(kv[..., :cfg.kv_lora_rank])
    k_pe = apply_rope_interleaved(kv[..., cfg.kv_lora_rank:], cos, sin)
    return c_kv, k_pe

  def _w_uk_uv(self):
    cfg = self.cfg
    w = self.kv_b_proj.kernel[...].reshape(cfg.kv_lora_rank, cfg.num_attention_heads,
                                         cfg.qk_nope_head_dim + cfg.v_head_dim)
    return w[..., :cfg.qk_nope_head_dim], w[..., cfg.qk_nope_head_dim:]   # [R,H,nope], [R,H,v]

  def __call__(self, x, cos, sin, ckv_cache, kpe_cache, cache_len, block_mask, *, absorbed: bool = True):
    """x: [B, T, D]; cos/sin: [B, T, P/2]; ckv_cache: [B, S, R]; kpe_cache: [B, S, P]; cache_len: [B];
    block_mask: [B, T, T] bool. Returns (out [B, T, D], ckv_cache, kpe_cache) with the block's latents
    written at [cache_len, cache_len + T)."""
    b, t, _ = x.shape
    q_nope, q_pe = self._queries(x, cos, sin)
    c_kv, k_pe = self.latents(x, cos, sin)
    ckv_cache = write_rows(ckv_cache, c_kv, cache_len)
    kpe_cache = write_rows(kpe_cache, k_pe, cache_len)
    w_uk, w_uv = self._w_uk_uv()
    if absorbed:
      q_lat = jnp.einsum("bthn,rhn->bthr", q_nope, w_uk)
      o_lat = self._absorbed_attention(q_lat, q_pe, ckv_cache, kpe_cache, cache_len, block_mask)
      o = jnp.einsum("bthr,rhv->bthv", o_lat, w_uv)
    else:
      o = self._expanded_attention(q_nope, q_pe, ckv_cache, kpe_cache, cache_len, block_mask, w_uk, w_uv)
    return self.o_proj(o.reshape(b, t, -1)), ckv_cache, kpe_cache

  def _absorbed_attention(self, q_lat, q_pe, ckv, kpe, cache_len, block_mask):
    """The custom call; on a mesh whose "model" axis splits the heads it runs per device on its own
    heads inside shard_map (a custom call cannot be partitioned by GSPMD), the latent cache replicated."""
    attend = lambda ql, qp, ck, kp, cl, bm: custom_calls.mla_attention(ql, qp, ck, kp, cl, bm,
                                                                        scale=self.cfg.softmax_scale)
    from ddtree_jax import sharding
    if not sharding.splits(self.mesh, self.cfg.num_attention_heads):
      return attend(q_lat, q_pe, ckv, kpe, cache_len, block_mask)
    row = sharding.batch_axis(self.mesh, q_lat.shape[0])
    heads = P(row, None, sharding.MODEL, None)
    per_seq = P(row)
    return jax.shard_map(attend, mesh=self.mesh, in_specs=(heads, heads, per_seq, per_seq, per_seq, per_seq),
                         out_specs=heads, check_vma=False)(q_lat, q_pe, ckv, kpe, cache_len, block_mask)

  def _expanded_attention(self, q_nope, q_pe, ckv, kpe, cache_len, block_mask, w_uk, w_uv):
    f32 = jnp.float32
    k_nope = jnp.einsum("bsr,rhn->bshn", ckv, w_uk)
    v = jnp.einsum("bsr,rhv->bshv", ckv, w_uv)
    s = jnp.einsum("bthn,bshn->bths", q_nope.astype(f32), k_nope.astype(f32))
    s += jnp.einsum("bthp,bsp->bths", q_pe.astype(f32), kpe.astype(f32))
    s *= self.cfg.softmax_scale
    vis = visibility_mask(cache_len, block_mask, ckv.shape[1])[:, :, None, :]
    s = jnp.where(vis, s, -jnp.inf)
    m = jnp.max(s, axis=-1, keepdims=True)
    p = jnp.exp(s - jnp.where(jnp.isfinite(m), m, 0.0))
    den = jnp.sum(p, axis=-1, keepdims=True)
    p = p / jnp.where(den > 0, den, 1.0)
    return jnp.einsum("bths,bshv->bthv", p, v.astype(f32)).astype(q_nope.dtype)
