"""The target model: absorbed vs expanded MLA, cached decode vs full forward, routing, features."""
import dataclasses
import functools

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from configs.tiny import tiny
from ddtree_jax.cache import init_latent_cache
from ddtree_jax.model.deepseek import DeepseekV3
from ddtree_jax.model.router import noaux_tc_route


@functools.partial(nnx.jit, static_argnames=("absorbed", "feature_layers"))
def fwd(m, tokens, pos, cache, mask, absorbed=True, feature_layers=()):
  """The model's forward, compiled (eager INT4 dequantisation op by op is slow)."""
  o = m(tokens, pos, cache, mask, absorbed=absorbed, feature_layers=feature_layers)
  return o.logits, o.cache, o.features


def causal(b, t):
  return jnp.broadcast_to(jnp.tril(jnp.ones((t, t), bool)), (b, t, t))


def empty_cache(cfg, b, s, dtype=jnp.float32):
  return init_latent_cache(cfg.num_hidden_layers, b, s, cfg.kv_lora_rank, cfg.qk_rope_head_dim, dtype)


@pytest.fixture(scope="module", params=["int4", "dense"])
def model(request):
  cfg = tiny(int4=request.param == "int4")
  return cfg, DeepseekV3(cfg, dtype=jnp.float32, rngs=nnx.Rngs(request.param == "int4"))


def test_absorbed_equals_expanded(model):
  cfg, m = model
  rng = np.random.default_rng(0)
  b, t = 2, 9
  tokens = jnp.asarray(rng.integers(0, cfg.vocab_size, (b, t)), jnp.int32)
  pos = jnp.broadcast_to(jnp.arange(t), (b, t))
  a_logits, a_cache, _ = fwd(m, tokens, pos, empty_cache(cfg, b, 32), causal(b, t), absorbed=True)
  e_logits, e_cache, _ = fwd(m, tokens, pos, empty_cache(cfg, b, 32), causal(b, t), absorbed=False)
  np.testing.assert_allclose(np.asarray(a_logits), np.asarray(e_logits), atol=2e-5, rtol=1e-4)
  # The two forms are separate compiled programs whose fp32 roundings differ by a few ulps (seen once: 2.2335622
  # vs 2.2335639, beyond an absolute 1e-6); a wrong attention form differs by O(1).
  for x, y in zip(a_cache.ckv, e_cache.ckv):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=1e-5, rtol=1e-5)


def test_cached_decode_equals_full_forward(model):
  cfg, m = model
  rng = np.random.default_rng(1)
  b, t, p = 2, 12, 5
  tokens = jnp.asarray(rng.integers(0, cfg.vocab_size, (b, t)), jnp.int32)
  pos = jnp.broadcast_to(jnp.arange(t), (b, t))
  full = fwd(m, tokens, pos, empty_cache(cfg, b, 32), causal(b, t))[0]
  logits, cache, _ = fwd(m, tokens[:, :p], pos[:, :p], empty_cache(cfg, b, 32), causal(b, p), absorbed=False)
  cache = dataclasses.replace(cache, lengths=jnp.full((b,), p, jnp.int32))
  step_logits = [logits]
  for i in range(p, t):
    logits, cache, _ = fwd(m, tokens[:, i:i + 1], pos[:, i:i + 1], cache, jnp.ones((b, 1, 1), bool))
    cache = dataclasses.replace(cache, lengths=cache.lengths + 1)
    step_logits.append(logits)
  np.testing.assert_allclose(np.asarray(jnp.concatenate(step_logits, 1)), np.asarray(full), atol=2e-5, rtol=1e-4)
  assert float(jnp.std(full)) > 1e-3   # not degenerate


def test_ragged_cache_lengths_are_independent(model):
  """Each sequence sees only its own committed prefix: garbage past lengths[b] changes nothing."""
  cfg, m = model
  rng = np.random.default_rng(2)
  b = 2
  cache = empty_cache(cfg, b, 16)
  noisy = dataclasses.replace(
      cache, ckv=tuple(jnp.asarray(rng.normal(size=c.shape), jnp.float32) for c in cache.ckv),
      kpe=tuple(jnp.asarray(rng.normal(size=c.shape), jnp.float32) for c in cache.kpe))
  lengths = jnp.asarray([3, 7], jnp.int32)
  tok = jnp.asarray([[5], [9]], jnp.int32)
  o1 = m(tok, lengths[:, None], dataclasses.replace(noisy, lengths=lengths), jnp.ones((b, 1, 1), bool))
  # Change everything at or past each sequence's length: the output must not move.
  changed = dataclasses.replace(noisy, ckv=tuple(
      jnp.where(jnp.arange(16)[None, :, None] >= lengths[:, None, None], 100.0, c) for c in noisy.ckv))
  o2 = m(tok, lengths[:, None], dataclasses.replace(changed, lengths=lengths), jnp.ones((b, 1, 1), bool))
  np.testing.assert_allclose(np.asarray(o1.logits), np.asarray(o2.logits), atol=1e-6)


def test_feature_layers_are_layer_outputs(model):
  cfg, m = model
  b, t = 1, 4
  tokens = jnp.arange(t, dtype=jnp.int32)[None]
  pos = jnp.arange(t)[None]
  o = m(tokens, pos, empty_cache(cfg, b, 16), causal(b, t), feature_layers=(2, 0))
  assert o.features.shape == (b, t, 2 * cfg.hidden_size)
  o_last = m(tokens, pos, empty_cache(cfg, b, 16), causal(b, t), feature_layers=(2,))
  np.testing.assert_allclose(np.asarray(o.features[..., :cfg.hidden_size]), np.asarray(o_last.features), atol=1e-6)
  np.testing.assert_allclose(np.asarray(m.logits(o_last.features)), np.asarray(o.logits), atol=1e-5)


def brute_force_route(logits, bias, k, n_group, topk_group, norm, scale):
  s = 1 / (1 + np.exp(-logits))
  choice = s + bias
  n, e = logits.shape
  ids = np.zeros((n, k), np.int64)
  w = np.zeros((n, k))
  for i in range(n):
    g = choice[i].reshape(n_group, -1)
    gs = np.sort(g, axis=1)[:, -2:].sum(1)
    keep = np.argsort(-gs, kind="stable")[:topk_group]
    allowed = np.concatenate([np.arange(j * (e // n_group), (j + 1) * (e // n_group)) for j in keep])
    order = allowed[np.argsort(-choice[i, allowed], kind="stable")][:k]
    ids[i] = order
    w[i] = s[i, order]
    if norm:
      w[i] /= w[i].sum() + 1e-20
  return ids, w * scale


@pytest.mark.parametrize("n_group, topk_group, norm", [(1, 1, True), (4, 2, True), (2, 1, False), (8, 3, True)])
def test_router_matches_brute_force(n_group, topk_group, norm):
  rng = np.random.default_rng(n_group * 10 + topk_group)
  logits = rng.normal(size=(16, 32)).astype(np.float32)
  bias = rng.normal(scale=0.3, size=(32,)).astype(np.float32)
  ids, w = noaux_tc_route(jnp.asarray(logits), jnp.asarray(bias), top_k=4, n_group=n_group, topk_group=topk_group,
                          norm_topk_prob=norm, routed_scaling_factor=2.5)
  ids_ref, w_ref = brute_force_route(logits, bias, 4, n_group, topk_group, norm, 2.5)
  assert np.array_equal(np.sort(np.asarray(ids), 1), np.sort(ids_ref, 1))
  np.testing.assert_allclose(np.sort(np.asarray(w), 1), np.sort(w_ref, 1), rtol=1e-5)
