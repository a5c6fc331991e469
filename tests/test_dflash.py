"""The DFlash drafter: an independent numpy reference, context masking, chunked appends, training path."""
import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ddtree_jax.config import DFlashConfig, RopeScaling, dflash_config_from_hf_dict
from ddtree_jax.drafter_cache import DrafterCache, init_drafter_cache
from ddtree_jax.model.dflash import DFlashDrafter
from ddtree_jax.model.qwen3_rope import hf_yarn_attention_factor, qwen3_rope_params

CFG = DFlashConfig(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=16, intermediate_size=128, block_size=4, mask_token_id=255,
                   target_layer_ids=(0, 2, 3), num_target_layers=4, rope_theta=10000.0)
CAP = 40
KD = len(CFG.target_layer_ids) * CFG.hidden_size


@functools.lru_cache(maxsize=None)
def _model(cfg=CFG):
  m = DFlashDrafter(cfg, dtype=jnp.float32, rngs=nnx.Rngs(0))
  # Non-trivial norm weights so that a norm applied in the wrong place shows up.
  rng = np.random.default_rng(0)
  for path, v in nnx.to_flat_state(nnx.state(m, nnx.Param)):
    if path[-1] == "weight":
      v.set_value(jnp.asarray(1.0 + 0.3 * rng.normal(size=v.shape), jnp.float32))
  return m


@functools.lru_cache(maxsize=None)
def _fns(cfg=CFG):
  graph, params = nnx.split(_model(cfg))

  @jax.jit
  def append(params, f, pos, n, cache):
    return nnx.merge(graph, params).append_context(f, pos, n, cache)

  @jax.jit
  def draft(params, e, pos, cache):
    return nnx.merge(graph, params)(e, pos, cache)

  @jax.jit
  def train(params, e, pos, f, cpos, anchor):
    return nnx.merge(graph, params).forward_train(e, pos, f, cpos, anchor)

  return params, append, draft, train


def _inputs(seed, b=2, c=12, bk=4, cfg=CFG):
  rng = np.random.default_rng(seed)
  kd = len(cfg.target_layer_ids) * cfg.hidden_size
  feats = jnp.asarray(rng.normal(size=(b, c, kd)), jnp.float32)
  embeds = jnp.asarray(rng.normal(size=(b, bk, cfg.hidden_size)), jnp.float32)
  return feats, embeds


# ---- independent numpy reference (HF Qwen3 conventions, GQA by repeat_kv) -----------------------

def _np_params(m):
  return {tuple(str(p) for p in path): np.asarray(v.get_value(), np.float64)
          for path, v in nnx.to_flat_state(nnx.state(m, nnx.Param))}


def _rms(x, w, eps):
  return x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps) * w


def _rope(x, pos, cfg):
  inv, fac = qwen3_rope_params(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling)
  ang = pos[:, None] * inv[None]                       # [T, hd/2]
  cos = np.concatenate([np.cos(ang)] * 2, -1)[:, None] * fac
  sin = np.concatenate([np.sin(ang)] * 2, -1)[:, None] * fac
  h = x.shape[-1] // 2
  rot = np.concatenate([-x[..., h:], x[..., :h]], -1)
  return x * cos + rot * sin


def np_reference(m, cfg, ctx_feats, ctx_pos, blk, blk_pos):
  """One sequence: ctx_feats [C, K*D], ctx_pos [C], blk [Bk, D], blk_pos [Bk] -> [Bk, D]."""
  P = _np_params(m)
  eps, H, KVH, hd = cfg.rms_norm_eps, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
  ctx = _rms(ctx_feats @ P[("fc", "kernel")], P[("hidden_norm", "weight")], eps)
  x = np.asarray(blk, np.float64)
  pos = np.concatenate([ctx_pos, blk_pos]).astype(np.float64)
  for i in range(cfg.num_hidden_layers):
    g = lambda *k: P[("layers", str(i)) + k]
    xn = _rms(x, g("input_layernorm", "weight"), eps)
    q = _rms((xn @ g("self_attn", "q_proj", "kernel")).reshape(-1, H, hd), g("self_attn", "q_norm", "weight"), eps)
    kin = np.concatenate([ctx, xn])               # context enters k/v without input_layernorm
    k = _rms((kin @ g("self_attn", "k_proj", "kernel")).reshape(-1, KVH, hd), g("self_attn", "k_norm", "weight"), eps)
    v = (kin @ g("self_attn", "v_proj", "kernel")).reshape(-1, KVH, hd)
    q = _rope(q, pos[len(ctx_pos):], cfg)
    k = _rope(k, pos, cfg)
    k, v = np.repeat(k, H // KVH, axis=1), np.repeat(v, H // KVH, axis=1)
    s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = np.einsum("hqk,khd->qhd", p, v).reshape(len(x), H * hd)
    x = x + o @ g("self_attn", "o_proj", "kernel")
    xn = _rms(x, g("post_attention_layernorm", "weight"), eps)
    a = xn @ g("mlp", "gate_proj", "kernel")
    x = x + ((a / (1 + np.exp(-a))) * (xn @ g("mlp", "up_proj", "kernel"))) @ g("mlp", "down_proj", "kernel")
  return _rms(x, P[("norm", "weight")], eps)


def _fill(append, params, feats, n_valid, cfg=CFG, cap=CAP):
  b, c, _ = feats.shape
  cache = init_drafter_cache(cfg, b, cap, jnp.float32)
  pos = jnp.broadcast_to(jnp.arange(c, dtype=jnp.int32), (b, c))
  return append(params, feats, pos, jnp.asarray(n_valid, jnp.int32), cache)


# ---- tests ----------------------------------------------------------------------------------------

def test_param_paths_and_shapes():
  m = _model()
  paths = {"/".join(str(p) for p in path): v.get_value().shape
           for path, v in nnx.to_flat_state(nnx.state(m, nnx.Param))}
  D, H, KVH, hd, I = 64, 4, 2, 16, 128
  want = {"fc/kernel": (3 * D, D), "hidden_norm/weight": (D,), "norm/weight": (D,)}
  for i in range(2):
    p = f"layers/{i}/"
    want.update({p + "self_attn/q_proj/kernel": (D, H * hd), p + "self_attn/k_proj/kernel": (D, KVH * hd),
                 p + "self_attn/v_proj/kernel": (D, KVH * hd), p + "self_attn/o_proj/kernel": (H * hd, D),
                 p + "self_attn/q_norm/weight": (hd,), p + "self_attn/k_norm/weight": (hd,),
                 p + "input_layernorm/weight": (D,), p + "post_attention_layernorm/weight": (D,),
                 p + "mlp/gate_proj/kernel": (D, I), p + "mlp/up_proj/kernel": (D, I),
                 p + "mlp/down_proj/kernel": (I, D)})
  assert paths == want


def test_matches_numpy_reference_gqa():
  params, append, draft, _ = _fns()
  feats, embeds = _inputs(1)
  n_valid = np.array([12, 7])
  cache = _fill(append, params, feats, n_valid)
  assert np.asarray(cache.lengths).tolist() == [12, 7]
  pos = jnp.asarray(n_valid[:, None] + np.arange(4), jnp.int32)
  out = np.asarray(draft(params, embeds, pos, cache))
  assert out.shape == (2, 4, 64)
  for b in range(2):
    n = n_valid[b]
    ref = np_reference(_model(), CFG, np.asarray(feats[b, :n], np.float64), np.arange(n),
                       np.asarray(embeds[b]), np.asarray(pos[b]))
    np.testing.assert_allclose(out[b], ref, rtol=2e-4, atol=2e-4)


def test_matches_numpy_reference_yarn_mha():
  cfg = dataclasses.replace(CFG, num_key_value_heads=4, rope_theta=1e6, rope_scaling=RopeScaling(
      type="yarn", factor=8.0, original_max_position_embeddings=16, beta_fast=32.0, beta_slow=1.0))
  params, append, draft, _ = _fns(cfg)
  feats, embeds = _inputs(2, cfg=cfg)
  cache = _fill(append, params, feats, [12, 12], cfg=cfg)
  pos = jnp.asarray(np.full((2, 1), 12) + np.arange(4), jnp.int32)
  out = np.asarray(draft(params, embeds, pos, cache))
  ref = np_reference(_model(cfg), cfg, np.asarray(feats[0], np.float64), np.arange(12), np.asarray(embeds[0]),
                     np.arange(12, 16))
  np.testing.assert_allclose(out[0], ref, rtol=2e-4, atol=2e-4)


def test_context_masking():
  params, append, draft, _ = _fns()
  feats, embeds = _inputs(3)
  cache = _fill(append, params, feats, [9, 5])
  pos = jnp.asarray(np.array([[9], [5]]) + np.arange(4), jnp.int32)
  base = np.asarray(draft(params, embeds, pos, cache))
  # Entries at or beyond lengths (garbage) change nothing.
  junk = DrafterCache(k=tuple(k.at[0, 9:].set(123.0).at[1, 5:].set(-7.0) for k in cache.k),
                      v=tuple(v.at[0, 9:].set(55.0).at[1, 5:].set(9.0) for v in cache.v), lengths=cache.lengths)
  np.testing.assert_array_equal(np.asarray(draft(params, embeds, pos, junk)), base)
  # A valid entry matters (to every block position), and only to its own sequence.
  pert = DrafterCache(k=cache.k, v=tuple(v.at[1, 4].add(1.0) for v in cache.v), lengths=cache.lengths)
  out = np.asarray(draft(params, embeds, pos, pert))
  np.testing.assert_array_equal(out[0], base[0])
  assert (np.abs(out[1] - base[1]).max(-1) > 1e-4).all()


def test_block_is_bidirectional():
  params, append, draft, _ = _fns()
  feats, embeds = _inputs(4)
  cache = _fill(append, params, feats, [6, 6])
  pos = jnp.asarray(np.full((2, 1), 6) + np.arange(4), jnp.int32)
  base = np.asarray(draft(params, embeds, pos, cache))
  out = np.asarray(draft(params, embeds.at[:, 3].add(1.0), pos, cache))
  assert (np.abs(out[:, 0] - base[:, 0]).max(-1) > 1e-4).all(), "position 0 must see the last block token"


def test_append_in_chunks_equals_one_chunk():
  params, append, draft, _ = _fns()
  feats, embeds = _inputs(5)
  one = _fill(append, params, feats, [12, 10])
  two = init_drafter_cache(CFG, 2, CAP, jnp.float32)
  pos = jnp.broadcast_to(jnp.arange(12, dtype=jnp.int32), (2, 12))
  # Sequence 0: 5 then 7; sequence 1: 3 then 7. Chunks are fixed-size 8 with garbage rows past n_valid.
  n1 = np.array([5, 3])
  idx1 = np.minimum(np.arange(8)[None], 11)
  idx2 = np.minimum(n1[:, None] + np.arange(8)[None], 11)
  f1 = jnp.take_along_axis(feats, jnp.asarray(idx1.repeat(2, 0))[:, :, None], axis=1)
  f2 = jnp.take_along_axis(feats, jnp.asarray(idx2)[:, :, None], axis=1)
  two = append(params, f1, jnp.take_along_axis(pos, jnp.asarray(idx1.repeat(2, 0)), 1), jnp.asarray(n1), two)
  two = append(params, f2, jnp.take_along_axis(pos, jnp.asarray(idx2), 1), jnp.asarray([7, 7]), two)
  assert np.asarray(two.lengths).tolist() == [12, 10]
  for l in range(CFG.num_hidden_layers):
    for b, n in enumerate([12, 10]):
      np.testing.assert_allclose(np.asarray(two.k[l][b, :n]), np.asarray(one.k[l][b, :n]), rtol=1e-6, atol=1e-6)
      np.testing.assert_allclose(np.asarray(two.v[l][b, :n]), np.asarray(one.v[l][b, :n]), rtol=1e-6, atol=1e-6)
  bpos = jnp.asarray(np.array([[12], [10]]) + np.arange(4), jnp.int32)
  np.testing.assert_allclose(np.asarray(draft(params, embeds, bpos, two)),
                             np.asarray(draft(params, embeds, bpos, one)), rtol=1e-5, atol=1e-5)


def test_forward_train_matches_inference():
  params, append, draft, train = _fns()
  rng = np.random.default_rng(6)
  b, s, nb, bk = 2, 16, 3, 4
  feats = jnp.asarray(rng.normal(size=(b, s, KD)), jnp.float32)
  anchor = np.array([[1, 6, 13], [4, 9, 15]], np.int32)
  embeds = jnp.asarray(rng.normal(size=(b, nb, bk, 64)), jnp.float32)
  bpos = jnp.asarray(anchor[:, :, None] + np.arange(bk), jnp.int32)
  cpos = jnp.broadcast_to(jnp.arange(s, dtype=jnp.int32), (b, s))
  out = np.asarray(train(params, embeds, bpos, feats, cpos, jnp.asarray(anchor)))
  assert out.shape == (b, nb, bk, 64)
  for j in range(nb):
    cache = _fill(append, params, feats, anchor[:, j])
    want = np.asarray(draft(params, embeds[:, j], bpos[:, j], cache))
    np.testing.assert_allclose(out[:, j], want, rtol=1e-5, atol=1e-5)


def test_hf_yarn_attention_factor():
  import math
  assert hf_yarn_attention_factor(RopeScaling()) == 1.0
  # mscale fields absent (parsed as mscale=1, mscale_all_dim=0): 0.1 ln(factor) + 1.
  assert hf_yarn_attention_factor(RopeScaling(type="yarn", factor=64.0)) == pytest.approx(0.1 * math.log(64) + 1)
  # mscale alone is ignored by HF; both set: the ratio (1.0 when equal, DeepSeek style).
  assert hf_yarn_attention_factor(RopeScaling(type="yarn", factor=40.0, mscale=0.707)) == pytest.approx(
      0.1 * math.log(40) + 1)
  assert hf_yarn_attention_factor(RopeScaling(type="yarn", factor=40.0, mscale=1.0, mscale_all_dim=1.0)) == 1.0
  cfg = dflash_config_from_hf_dict({
      "vocab_size": 256, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
      "intermediate_size": 128, "block_size": 8, "dflash_config": {"mask_token_id": 1, "target_layer_ids": [0]},
      "rope_theta": 50000.0, "rope_scaling": {"rope_type": "yarn", "factor": 64.0,
                                              "original_max_position_embeddings": 4096}})
  inv, fac = qwen3_rope_params(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling)
  assert inv.shape == (8,) and fac == pytest.approx(0.1 * math.log(64) + 1)
