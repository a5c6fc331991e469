"""Decisions from vocabulary shards: the lm_head's logits stay split over the "model" axis
([..., V/n] per device) and only per-row scalars or top-k candidates cross devices.

- argmax: local (max, first index), then pmax of the max and pmin of the global index among the shards
  that hold it -> the lowest index among ties, exactly like jnp.argmax.
- sampling: jax.random.categorical(key, x) is argmax(gumbel(key, x.shape) + x); the Gumbel noise is
  generated for the full [..., V] shape but laid out in vocabulary shards (threefry is partitionable:
  element i depends only on the key and i), so the sample is the one a single device draws.
  top-k: the k-th largest value from the gathered local top-k candidates (k * n values per row).
  top-p: keep x iff the probability mass of the tokens with a strictly larger value is < top_p (the rule
  the single-device sorted-cumsum implements); the cut value is found exactly by a 32-step bisection over
  the ordered bit patterns of float32, each step one psum of a per-row scalar.
- drafter top-K log-probs: local log-softmax with the global max (pmax) and normaliser (psum of the
  local sums), local top-K, all_gather of the K*n candidates, top-K of those (ties: lowest index first,
  as lax.top_k).
Every function takes the full logits array (a global jax.Array sharded on its last axis) and a mesh.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

from ddtree_jax import sharding as sh
from ddtree_jax import topk

AXIS = sh.MODEL


def applies(mesh, vocab: int) -> bool:
  """True when the vocabulary is split over the mesh's "model" axis."""
  return sh.splits(mesh, vocab)


def _specs(mesh, shape):
  """(logits spec [..., V] split on V, row spec [...]) for a logits array of `shape`."""
  lead = (sh.batch_axis(mesh, shape[0]),) + (None,) * (len(shape) - 2)
  return P(*lead, AXIS), P(*lead)


def _offset(v_local: int):
  return jax.lax.axis_index(AXIS) * v_local


def _argmax_local(x):
  """Inside shard_map: x [..., Vl] -> global index of the first maximum (as jnp.argmax)."""
  vl = x.shape[-1]
  m = jnp.max(x, axis=-1)
  i = jnp.argmax(x, axis=-1).astype(jnp.int32) + _offset(vl)
  g = jax.lax.pmax(m, AXIS)
  big = jnp.iinfo(jnp.int32).max
  return jax.lax.pmin(jnp.where(m == g, i, big), AXIS)


def argmax(logits, mesh):
  """logits: [..., V] sharded on V -> int32 [...]."""
  spec, row = _specs(mesh, logits.shape)
  return jax.shard_map(_argmax_local, mesh=mesh, in_specs=(spec,), out_specs=row, check_vma=False)(logits)


def _ordered_key(x):
  """float32 -> int32 with the same order (for bisection over values)."""
  b = jax.lax.bitcast_convert_type(x.astype(jnp.float32), jnp.int32)
  return jnp.where(b < 0, b ^ jnp.int32(0x7FFFFFFF), b)


def _filter_local(x, temperature: float, top_k: int, top_p: float, vocab: int):
  """Inside shard_map: the vocab-parallel `sampling.filtered_logits` of local logits x [..., Vl]."""
  x = x.astype(jnp.float32) / temperature
  vl = x.shape[-1]
  if top_k and top_k < vocab:
    local = topk.top_k(x, min(top_k, vl))[0]                                   # [..., k'] (as lax.top_k)
    cands = jax.lax.all_gather(local, AXIS, axis=x.ndim - 1, tiled=True)      # [..., n*k']
    kth = jax.lax.top_k(cands, top_k)[0][..., -1:]
    x = jnp.where(x < kth, -jnp.inf, x)
  if top_p < 1.0:
    m = jax.lax.pmax(jnp.max(x, axis=-1, keepdims=True), AXIS)
    e = jnp.exp(x - m)
    probs = e / jax.lax.psum(jnp.sum(e, axis=-1, keepdims=True), AXIS)
    keys = _ordered_key(x)

    def mass_above(k):                      # k: [..., 1] int32 -> mass of tokens with key > k
      return jax.lax.psum(jnp.sum(jnp.where(keys > k, probs, 0.0), axis=-1, keepdims=True), AXIS)

    # Smallest integer key c with mass_above(c) < top_p: the mass drops only at the keys of tokens, so
    # c is the key of the cut token; keep every token with key >= c.
    lo = jnp.full(m.shape, jnp.iinfo(jnp.int32).min, jnp.int32)                # invariant: mass(lo) >= p
    hi = jnp.full(m.shape, jnp.iinfo(jnp.int32).max, jnp.int32)                # invariant: mass(hi) < p

    def step(_, lohi):
      lo, hi = lohi
      mid = (lo >> 1) + (hi >> 1) + (lo & hi & 1)
      below = mass_above(mid) < top_p
      return jnp.where(below, lo, mid), jnp.where(below, mid, hi)
    lo, hi = jax.lax.fori_loop(0, 32, step, (lo, hi))
    x = jnp.where(keys < hi, -jnp.inf, x)
  return x


def filtered_logits(logits, params, mesh):
  """The vocab-parallel `sampling.filtered_logits`: [..., V] -> [..., V], same sharding."""
  spec, _ = _specs(mesh, logits.shape)
  f = lambda x: _filter_local(x, params.temperature, params.top_k, params.top_p, logits.shape[-1])
  return jax.shard_map(f, mesh=mesh, in_specs=(spec,), out_specs=spec, check_vma=False)(logits)


def choose_tokens(logits, key, params, mesh):
  """The vocab-parallel `sampling.choose_tokens`: greedy argmax, or the sample that
  jax.random.categorical(key, filtered_logits(logits)) draws on one device."""
  if params.greedy:
    return argmax(logits, mesh)
  spec, row = _specs(mesh, logits.shape)
  x = logits.astype(jnp.float32)
  noise = jax.random.gumbel(key, x.shape, x.dtype)
  noise = jax.lax.with_sharding_constraint(noise, NamedSharding(mesh, spec))   # generated shard by shard
  vocab = x.shape[-1]

  def f(x, g):
    return _argmax_local(g + _filter_local(x, params.temperature, params.top_k, params.top_p, vocab))
  return jax.shard_map(f, mesh=mesh, in_specs=(spec, spec), out_specs=row, check_vma=False)(x, noise)


def logsumexp(logits, mesh):
  """[..., V] -> [...] fp32 logsumexp over the full vocabulary."""
  spec, row = _specs(mesh, logits.shape)

  def f(x):
    x = x.astype(jnp.float32)
    m = jax.lax.pmax(jnp.max(x, axis=-1), AXIS)
    return m + jnp.log(jax.lax.psum(jnp.sum(jnp.exp(x - m[..., None]), axis=-1), AXIS))
  return jax.shard_map(f, mesh=mesh, in_specs=(spec,), out_specs=row, check_vma=False)(logits)


def top_k_logprobs(logits, k: int, mesh):
  """[..., V] -> (log-probs [..., k] fp32 normalised over the full vocabulary, token ids [..., k] int32),
  as jax.lax.top_k(jax.nn.log_softmax(logits), k)."""
  spec, _ = _specs(mesh, logits.shape)
  out = P(*spec[:-1], None)

  def f(x):
    x = x.astype(jnp.float32)
    vl = x.shape[-1]
    m = jax.lax.pmax(jnp.max(x, axis=-1, keepdims=True), AXIS)
    shifted = x - m
    lp = shifted - jnp.log(jax.lax.psum(jnp.sum(jnp.exp(shifted), axis=-1, keepdims=True), AXIS))
    v, i = topk.top_k(lp, min(k, vl))                                           # lax.top_k's result
    i = i.astype(jnp.int32) + _offset(vl)
    av = jax.lax.all_gather(v, AXIS, axis=x.ndim - 1, tiled=True)               # [..., n*k']
    ai = jax.lax.all_gather(i, AXIS, axis=x.ndim - 1, tiled=True)
    tv, ti = jax.lax.top_k(av, k)
    return tv, jnp.take_along_axis(ai, ti, axis=-1)
  return jax.shard_map(f, mesh=mesh, in_specs=(spec,), out_specs=(out, out), check_vma=False)(logits)
