"""Cache-free training forward passes of the target (causal, whole sequences).

Computes the same function as `DeepseekV3.__call__` over an empty cache with a causal mask and
`absorbed=False` (tests/test_train.py checks this), but without the latent cache, and with a
training-friendly MoE:
- `capacity_factor=float`: tokens are dispatched to fixed-size expert slots (E x C) and run as one
  batched matmul; (token, expert) pairs past an expert's capacity are dropped (training only);
- `capacity_factor=None`: exact, every expert runs on every token and the routing weights select
  (used for evaluation and for the frozen target features of drafter training).
INT4 experts are dequantised on the fly (the same values the inference kernels use).
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from custom_calls.moe_int4.k_chunks import from_k_chunks
from custom_calls.moe_int4.layout import dequantize_int4
from ddtree_jax.model.experts import DenseExperts
from ddtree_jax.model.rope import rope_cos_sin


def causal_mla(attn, x, cos, sin):
  """attn: model.mla.MLA; x: [B, T, D] (normed) -> [B, T, D]."""
  cfg = attn.cfg
  b, t, _ = x.shape
  q_nope, q_pe = attn._queries(x, cos, sin)               # [B,T,H,n], [B,T,H,r]
  c_kv, k_pe = attn.latents(x, cos, sin)                  # [B,T,R], [B,T,P]
  w_uk, w_uv = attn._w_uk_uv()
  k_nope = jnp.einsum("bsr,rhn->bshn", c_kv, w_uk)
  v = jnp.einsum("bsr,rhv->bshv", c_kv, w_uv)
  f32 = jnp.float32
  s = jnp.einsum("bthn,bshn->bhts", q_nope, k_nope, preferred_element_type=f32)
  s += jnp.einsum("bthp,bsp->bhts", q_pe, k_pe, preferred_element_type=f32)
  s *= cfg.softmax_scale
  causal = jnp.tril(jnp.ones((t, t), bool))
  s = jnp.where(causal[None, None], s, -jnp.inf)
  p = jax.nn.softmax(s, axis=-1).astype(v.dtype)
  o = jnp.einsum("bhts,bshv->bthv", p, v, preferred_element_type=f32).astype(x.dtype)
  return attn.o_proj(o.reshape(b, t, -1))


def expert_weights(experts, dtype):
  """-> w_gate, w_up [E, D, I]; w_down [E, I, D] in `dtype` (dequantised when INT4)."""
  if isinstance(experts, DenseExperts):
    return experts.w_gate[...].astype(dtype), experts.w_up[...].astype(dtype), experts.w_down[...].astype(dtype)
  g = experts.group_size
  def deq(p, s):
    p, s = p[...], s[...]
    if p.ndim == 4:                                  # k-chunked (Int4Experts.use_k_chunks): the stored layout first
      p, s = from_k_chunks(p, s)
    return jnp.swapaxes(dequantize_int4(p, s, group_size=g, dtype=dtype), 1, 2)
  return (deq(experts.gate_packed, experts.gate_scale), deq(experts.up_packed, experts.up_scale),
          deq(experts.down_packed, experts.down_scale))


def routed_exact(x, ids, weights, w_gate, w_up, w_down):
  """Every expert on every token. x: [N, D]; ids/weights: [N, K] -> [N, D] fp32."""
  n = x.shape[0]
  e = w_gate.shape[0]
  comb = jnp.zeros((n, e), jnp.float32).at[jnp.arange(n)[:, None], ids].add(weights)
  g = jnp.einsum("nd,edi->nei", x, w_gate, preferred_element_type=jnp.float32)
  u = jnp.einsum("nd,edi->nei", x, w_up, preferred_element_type=jnp.float32)
  h = (jax.nn.silu(g) * u * comb[:, :, None]).astype(x.dtype)
  return jnp.einsum("nei,eid->nd", h, w_down, preferred_element_type=jnp.float32)


def routed_capacity(x, ids, weights, w_gate, w_up, w_down, capacity_factor):
  """Fixed-capacity dispatch. Returns ([N, D] fp32, fraction of (token, expert) pairs dropped)."""
  n, d = x.shape
  k = ids.shape[1]
  e = w_gate.shape[0]
  cap = max(1, int(math.ceil(n * k / e * capacity_factor)))
  flat_e = ids.reshape(-1)                                              # [NK]
  onehot = jax.nn.one_hot(flat_e, e, dtype=jnp.int32)                    # [NK, E]
  pos = jnp.sum((jnp.cumsum(onehot, axis=0) - 1) * onehot, axis=-1)      # rank within its expert
  keep = pos < cap
  slot = jnp.where(keep, flat_e * cap + pos, e * cap)                    # overflow -> a dummy row
  token = jnp.arange(n * k) // k
  xs = jnp.zeros((e * cap + 1, d), x.dtype).at[slot].set(x[token])[:-1].reshape(e, cap, d)
  g = jnp.einsum("ecd,edi->eci", xs, w_gate, preferred_element_type=jnp.float32)
  u = jnp.einsum("ecd,edi->eci", xs, w_up, preferred_element_type=jnp.float32)
  h = (jax.nn.silu(g) * u).astype(x.dtype)
  y = jnp.einsum("eci,eid->ecd", h, w_down, preferred_element_type=jnp.float32).reshape(e * cap, d)
  y = jnp.concatenate([y, jnp.zeros((1, d), y.dtype)], axis=0)
  w = (weights.reshape(-1) * keep).astype(jnp.float32)
  out = (y[slot] * w[:, None]).reshape(n, k, d).sum(axis=1)
  return out, 1.0 - jnp.mean(keep.astype(jnp.float32))


def moe_forward(moe, x, capacity_factor):
  """moe: model.moe.MoE; x: [B, T, D] -> (y [B, T, D], expert load [E] (fraction of pairs), dropped)."""
  b, t, d = x.shape
  flat = x.reshape(b * t, d)
  ids, weights = moe.gate(flat)
  wg, wu, wd = expert_weights(moe.experts, x.dtype)
  if capacity_factor is None:
    y, dropped = routed_exact(flat, ids, weights, wg, wu, wd), jnp.float32(0.0)
  else:
    y, dropped = routed_capacity(flat, ids, weights, wg, wu, wd, capacity_factor)
  if moe.shared_experts is not None:
    y = y + moe.shared_experts(flat).astype(jnp.float32)
  load = jnp.bincount(ids.reshape(-1), length=wg.shape[0]) / ids.size
  return y.astype(x.dtype).reshape(b, t, d), load, dropped


def target_forward(model, tokens, *, capacity_factor=None, feature_layers=()):
  """model: DeepseekV3; tokens: [B, T] int32 (positions 0..T-1, causal).

  Returns dict(hidden [B, T, D] before the final norm, features [B, T, K*D] or None,
  loads [n_moe_layers, E], dropped [n_moe_layers])."""
  b, t = tokens.shape
  positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
  x = model.embed(tokens)
  cos, sin = rope_cos_sin(positions, model.inv_freq, model.rope_multiplier)
  feats, loads, dropped = {}, [], []
  for i, layer in enumerate(model.layers):
    h = x + causal_mla(layer.self_attn, layer.input_layernorm(x), cos, sin)
    hn = layer.post_attention_layernorm(h)
    if hasattr(layer.mlp, "gate") and hasattr(layer.mlp, "experts"):
      y, load, drop = moe_forward(layer.mlp, hn, capacity_factor)
      loads.append(load)
      dropped.append(drop)
    else:
      y = layer.mlp(hn)
    x = h + y
    if i in feature_layers:
      feats[i] = x
  features = jnp.concatenate([feats[i] for i in feature_layers], axis=-1) if feature_layers else None
  return {"hidden": x, "features": features,
          "loads": jnp.stack(loads) if loads else jnp.zeros((0, 1)),
          "dropped": jnp.stack(dropped) if dropped else jnp.zeros((0,))}
