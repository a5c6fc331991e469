"""Kimi K2.6 at real size, one GPU's slice of an 8-way mesh: AR decode step and DDTree verify forward.

What one of 8 GPUs computes per layer when K2.6 runs on the mesh of `ddtree_jax/sharding.py`
(heads split 8 of 64, experts split 48 of 384, latent cache replicated, dense MLP / shared expert /
lm_head split 8-way), at the real dimensions, with random weights in the real formats: INT4 routed
experts as compressed-tensors packed int32 words + bf16 group-32 scales, bf16 everything else.

Choice (documented as the issue asks): the slice is written at per-GPU shapes directly, as pure
functions over parameter dicts (not the DeepseekV3 module), so that (a) the routing can be imposed --
each token's top-8 ids are drawn over all 384 experts (random, or Zipf-skewed) and only the pairs that
land on this GPU's 48 experts (ids 0..47, expert_offset 0) are computed, exactly as the expert-parallel
shard_map body does -- and (b) the kernel implementation (Pallas as the model dispatches it, or XLA) can be chosen
per program (each row records the MLA kernel that ran: Mosaic GPU or Triton). The
router still runs (replicated [7168, 384] gate, its sigmoid weights are gathered at the imposed ids).
Not measured (added by the cost model): the two all-reduces per layer (after o_proj and after the MLP),
the drafter, the embedding gather, the tree build / walk / cache compaction.

Layers: 1 dense (layer 0 of K2.6) + `--moe_layers` MoE layers (default 3), then final norm + the lm_head
vocabulary shard (163840 / 8) and a local argmax. Tokens T = 1 (AR) and T = N + 1 (a tree of N nodes
under a random ancestor mask) over a committed context of 4K and 32K tokens (a cache buffer per context,
the block written in place: the cache is donated like the engine's state).

Timing: one jit per (impl, context, T) with the routing as a runtime argument (random and Zipf share the
program); warm-up, then the median of `--reps` calls each ended by block_until_ready (time_s, host dispatch
included), and the time per call of `--reps` calls enqueued back to back (pipelined_s, the device's time when the
host runs ahead, as it does in the engine; the cost model fits this one when the rows have it). Roofline: bytes
(weights of the layer + weights of the local experts touched + cache read/write) over the copy
bandwidth, FLOPs over the bf16 matmul rate, both measured at the start of the same run.

Usage (GPU): PYTHONPATH=. python3 benchmarks/k26_slice.py            (writes $OUT/k26_slice.json)
       (CPU): PYTHONPATH=. python benchmarks/k26_slice.py --smoke    (tiny sizes, a test runs it)
A `--budget_s` wall-clock guard stops starting new programs when it is exceeded (the JSON says so).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import custom_calls
from custom_calls.mla_attention import select_kernel
from custom_calls.moe_int4 import KERNEL_K_CHUNK, experts_to_k_chunks, kernel_chunk_fits
from custom_calls.moe_int4.mosaic_experts import MAX_TOKENS as MOSAIC_MAX_TOKENS
from custom_calls.moe_int4.mosaic_experts import routed_experts_int4_mosaic
from custom_calls.moe_int4.mosaic_layout import to_mosaic_layout
from ddtree_jax.model.norm import rms_norm
from ddtree_jax.model.rope import apply_rope_interleaved, rope_cos_sin, yarn_inv_freq
from ddtree_jax.train.common import write_json


@dataclasses.dataclass(frozen=True)
class SliceDims:
  """Per-GPU shapes of one of `mesh` GPUs (full-model numbers / mesh where split)."""
  hidden: int = 7168
  heads_total: int = 64
  mesh: int = 8
  q_lora: int = 1536
  kv_lora: int = 512
  nope: int = 128
  rope: int = 64
  v_dim: int = 128
  dense_inter_total: int = 18432
  moe_inter: int = 2048
  experts_total: int = 384
  top_k: int = 8
  shared_inter_total: int = 2048
  vocab_total: int = 163840
  group: int = 32
  eps: float = 1e-5
  latent_eps: float = 1e-6
  rope_theta: float = 50000.0
  yarn_factor: float = 64.0
  yarn_orig: int = 4096
  routed_scaling: float = 2.827

  @property
  def heads(self): return self.heads_total // self.mesh
  @property
  def experts(self): return self.experts_total // self.mesh
  @property
  def dense_inter(self): return self.dense_inter_total // self.mesh
  @property
  def shared_inter(self): return self.shared_inter_total // self.mesh
  @property
  def vocab(self): return self.vocab_total // self.mesh
  @property
  def softmax_scale(self):
    m = 0.1 * math.log(self.yarn_factor) + 1.0 if self.yarn_factor > 1 else 1.0
    return (self.nope + self.rope) ** -0.5 * m * m

  # ---- bytes of weights (per GPU) ----
  def attn_weight_bytes(self):
    h = self.heads
    n = (self.hidden * self.q_lora + self.q_lora * h * (self.nope + self.rope)
         + self.hidden * (self.kv_lora + self.rope) + self.kv_lora * h * (self.nope + self.v_dim)
         + h * self.v_dim * self.hidden)
    return 2 * n
  def dense_mlp_bytes(self): return 2 * 3 * self.hidden * self.dense_inter
  def shared_bytes(self): return 2 * 3 * self.hidden * self.shared_inter
  def router_bytes(self): return 2 * self.hidden * self.experts_total
  def expert_bytes(self):
    """One INT4 expert: packed int32 words (in/8 per row) + bf16 scales (in/group per row), gate+up+down."""
    d, i, g = self.hidden, self.moe_inter, self.group
    words = 2 * i * (d // 8) + d * (i // 8)
    scales = 2 * i * (d // g) + d * (i // g)
    return 4 * words + 2 * scales
  def lm_head_bytes(self): return 2 * self.hidden * self.vocab
  def cache_token_bytes(self): return 2 * (self.kv_lora + self.rope)

  # ---- FLOPs (per GPU) ----
  def attn_proj_flops(self, t):
    return 2 * t * self.attn_weight_bytes() // 2 + 2 * 2 * t * self.heads * self.nope * self.kv_lora
  def attn_core_flops(self, t, ctx):
    """Absorbed MLA: scores (576) + values (512) per (query, head, key)."""
    return 2 * t * self.heads * (ctx + t) * (self.kv_lora + self.rope + self.kv_lora)
  def expert_flops(self, local_pairs): return 2 * local_pairs * 3 * self.hidden * self.moe_inter


H200 = SliceDims()
SMOKE = SliceDims(hidden=256, heads_total=16, mesh=8, q_lora=64, kv_lora=64, nope=16, rope=16, v_dim=16,
                  dense_inter_total=512, moe_inter=128, experts_total=64, top_k=4, shared_inter_total=128,
                  vocab_total=1024)


# ---- parameters -------------------------------------------------------------------------------------

def _normal(key, shape, dtype=jnp.bfloat16, std=0.02):
  return (std * jax.random.normal(key, shape, jnp.float32)).astype(dtype)


def init_attention(key, d: SliceDims):
  ks = jax.random.split(key, 5)
  h = d.heads
  return dict(
      in_norm=jnp.ones((d.hidden,), jnp.bfloat16), post_norm=jnp.ones((d.hidden,), jnp.bfloat16),
      q_a=_normal(ks[0], (d.hidden, d.q_lora)), q_a_norm=jnp.ones((d.q_lora,), jnp.bfloat16),
      q_b=_normal(ks[1], (d.q_lora, h * (d.nope + d.rope))),
      kv_a=_normal(ks[2], (d.hidden, d.kv_lora + d.rope)), kv_a_norm=jnp.ones((d.kv_lora,), jnp.bfloat16),
      kv_b=_normal(ks[3], (d.kv_lora, h * (d.nope + d.v_dim))),
      o=_normal(ks[4], (h * d.v_dim, d.hidden)))


def init_int4_experts(key, d: SliceDims):
  """compressed-tensors layout, stacked over the local experts: packed int32 [E, out, in/8] (random words:
  every nibble is a valid INT4 value), bf16 scales [E, out, in/group]."""
  e, dd, i, g = d.experts, d.hidden, d.moe_inter, d.group
  ks = jax.random.split(key, 6)
  words = lambda k, s: jax.random.bits(k, s, jnp.uint32).view(jnp.int32)
  scales = lambda k, s: (0.004 * (1 + jax.random.uniform(k, s))).astype(jnp.bfloat16)
  return (words(ks[0], (e, i, dd // 8)), scales(ks[1], (e, i, dd // g)),
          words(ks[2], (e, i, dd // 8)), scales(ks[3], (e, i, dd // g)),
          words(ks[4], (e, dd, i // 8)), scales(ks[5], (e, dd, i // g)))


def kernel_layout_params(params, d: SliceDims):
  """(params with every MoE layer's experts k-chunked, chunk) as the engine lays them out for the GPU kernels
  (ddtree_jax/model/experts.py kernel_k_chunk); (params, None) when the experts do not fit the chunk."""
  c = KERNEL_K_CHUNK
  if not kernel_chunk_fits(d.hidden, d.moe_inter, d.group, c):
    return params, None
  moe = [dict(m, experts=experts_to_k_chunks(m["experts"], c, group_size=d.group)) for m in params["moe"]]
  return dict(params, moe=moe), c


def init_params(key, d: SliceDims, moe_layers: int):
  keys = jax.random.split(key, 2 + 2 * (moe_layers + 1))
  dense = dict(attn=init_attention(keys[0], d),
               mlp=tuple(_normal(k, s) for k, s in zip(jax.random.split(keys[1], 3),
                                                       [(d.hidden, d.dense_inter)] * 2 + [(d.dense_inter, d.hidden)])))
  moes = []
  for li in range(moe_layers):
    ka, km = keys[2 + 2 * li], keys[3 + 2 * li]
    k1, k2, k3 = jax.random.split(km, 3)
    moes.append(dict(
        attn=init_attention(ka, d),
        router=_normal(k1, (d.hidden, d.experts_total)),
        bias=jnp.zeros((d.experts_total,), jnp.float32),
        shared=tuple(_normal(k, s) for k, s in zip(jax.random.split(k2, 3),
                                                   [(d.hidden, d.shared_inter)] * 2 + [(d.shared_inter, d.hidden)])),
        experts=init_int4_experts(k3, d)))
  kl = keys[-1]
  return dict(dense=dense, moe=moes, final_norm=jnp.ones((d.hidden,), jnp.bfloat16),
              lm_head=_normal(kl, (d.hidden, d.vocab)))


# ---- forward (one GPU's part of a layer) -----------------------------------------------------------

# The slice's kernel paths -> the custom calls' impl: "pallas" is what the model runs on the GPU (the dispatch:
# Mosaic GPU or Triton MLA kernel by shape, the INT4 gemv or grouped MoE kernel by token count), "xla" the references,
# "mosaic_moe" the dispatch's attention with the routed experts on custom_calls/moe_int4/mosaic_experts.py (not
# dispatched by the model yet; up to its MAX_TOKENS tokens; its experts in mosaic_layout.py's layout; on a CPU in
# Mosaic GPU interpret mode).
CUSTOM_CALL_IMPL = {"pallas": "auto", "xla": "xla", "mosaic_moe": "auto"}


def mosaic_layout_params(params, d: SliceDims, wgmma_order: bool):
  """params with every MoE layer's experts in mosaic_layout.py's layout."""
  moe = [dict(m, experts=to_mosaic_layout(*m["experts"], group_size=d.group, wgmma_order=wgmma_order))
         for m in params["moe"]]
  return dict(params, moe=moe)


# ---- weight layouts ---------------------------------------------------------------------------------
# Where a bf16 projection's weight is stored [in, out] ("kn", as the model stores every Linear today) or [out, in]
# ("nk", inputs contiguous per output, the checkpoint's own layout), and which projections sharing an input are
# one product. Issue 6 fourteenth round, call 1 (benchmarks/matvec_forms.py, one token): q_b, o_proj and the
# shared expert's gate/up each ran 1.6-1.8x faster stored [out, in]; q_a, kv_a and the dense MLP did not.
LAYOUTS = {
    "kn": "every weight [in, out] (the model's layout)",
    "nk": "q_b, o_proj stored [out, in]; the shared expert's gate and up one [2 x I, D] weight",
    "nk_qkv": "nk, and q_a / kv_a one [D, q_lora + kv_lora + rope] weight (one product for both)",
}
MODEL_LAYOUT = "kn"


def dot_nk(x, w_nk):
  """x [..., K] @ w_nk[N, K]^T -> [..., N] (a weight stored [out, in])."""
  return jax.lax.dot_general(x, w_nk, (((x.ndim - 1,), (1,)), ((), ())))


def relayout_params(params, layout: str):
  """The slice's parameters in one of LAYOUTS (values unchanged: the same products, other storage)."""
  if layout not in LAYOUTS:
    raise ValueError(f"k26_slice: unknown layout {layout!r}; expected one of {list(LAYOUTS)}")
  if layout == "kn":
    return params

  def attn(p):
    p = dict(p, q_b_nk=p["q_b"].T, o_nk=p["o"].T)
    del p["q_b"], p["o"]
    if layout == "nk_qkv":
      p["qkv_a"] = jnp.concatenate([p.pop("q_a"), p.pop("kv_a")], axis=1)
    return p

  dense = dict(params["dense"], attn=attn(params["dense"]["attn"]))
  moes = []
  for m in params["moe"]:
    wg, wu, wd = m["shared"]
    m = dict(m, attn=attn(m["attn"]), shared_gate_up_nk=jnp.concatenate([wg.T, wu.T], axis=0), shared_down=wd)
    del m["shared"]
    moes.append(m)
  return dict(params, dense=dense, moe=moes)


def attention(p, x, cos, sin, ckv, kpe, cache_len, mask, d: SliceDims, impl: str):
  """x: [1, T, D] -> (partial o_proj output [1, T, D] (all-reduced on the mesh), ckv, kpe). p in any LAYOUTS."""
  b, t, _ = x.shape
  h = d.heads
  xn = rms_norm(x, p["in_norm"], d.eps)
  if "qkv_a" in p:
    q_a, kv = jnp.split(xn @ p["qkv_a"], [d.q_lora], axis=-1)
  else:
    q_a, kv = xn @ p["q_a"], xn @ p["kv_a"]
  q_a = rms_norm(q_a, p["q_a_norm"], d.latent_eps)
  q = dot_nk(q_a, p["q_b_nk"]) if "q_b_nk" in p else q_a @ p["q_b"]
  q = q.reshape(b, t, h, d.nope + d.rope)
  q_nope, q_pe = q[..., :d.nope], q[..., d.nope:]
  q_pe = apply_rope_interleaved(q_pe, cos[:, :, None, :], sin[:, :, None, :])
  c_kv = rms_norm(kv[..., :d.kv_lora], p["kv_a_norm"], d.latent_eps)
  k_pe = apply_rope_interleaved(kv[..., d.kv_lora:], cos, sin)
  ckv = jax.lax.dynamic_update_slice(ckv, c_kv.astype(ckv.dtype), (0, cache_len[0], 0))
  kpe = jax.lax.dynamic_update_slice(kpe, k_pe.astype(kpe.dtype), (0, cache_len[0], 0))
  w = p["kv_b"].reshape(d.kv_lora, h, d.nope + d.v_dim)
  w_uk, w_uv = w[..., :d.nope], w[..., d.nope:]
  q_lat = jnp.einsum("bthn,rhn->bthr", q_nope, w_uk)
  o_lat = custom_calls.mla_attention(q_lat, q_pe, ckv, kpe, cache_len, mask, scale=d.softmax_scale,
                                     impl=CUSTOM_CALL_IMPL[impl])
  o = jnp.einsum("bthr,rhv->bthv", o_lat, w_uv)
  o = o.reshape(b, t, h * d.v_dim)
  return (dot_nk(o, p["o_nk"]) if "o_nk" in p else o @ p["o"]), ckv, kpe


def swiglu(x, wg, wu, wd):
  return (jax.nn.silu(x @ wg) * (x @ wu)) @ wd


def moe(p, x, ids, d: SliceDims, impl: str, moe_opts=()):
  """x: [T, D]; ids: [T, top_k] imposed routing over all experts (local = ids < d.experts).
  moe_opts: (name, value) pairs for routed_experts_int4_mosaic (impl "mosaic_moe")."""
  logits = jnp.dot(x.astype(jnp.float32), p["router"].astype(jnp.float32))
  scores = jax.nn.sigmoid(logits)
  w = jnp.take_along_axis(scores, ids, axis=1)
  w = w / (jnp.sum(w, axis=-1, keepdims=True) + 1e-20) * d.routed_scaling
  if impl == "mosaic_moe":
    y = routed_experts_int4_mosaic(x, ids, w, p["experts"], 0, group_size=d.group,
                                   interpret=jax.default_backend() != "gpu", **dict(moe_opts)).astype(jnp.float32)
  else:
    y = custom_calls.routed_experts_int4(x, ids, w, *p["experts"], group_size=d.group, expert_offset=0,
                                         impl=CUSTOM_CALL_IMPL[impl]).astype(jnp.float32)
  if "shared_gate_up_nk" in p:
    g, u = jnp.split(dot_nk(x, p["shared_gate_up_nk"]), 2, axis=-1)
    shared = (jax.nn.silu(g) * u) @ p["shared_down"]
  else:
    shared = swiglu(x, *p["shared"])
  return (y + shared.astype(jnp.float32)).astype(x.dtype)


def slice_forward(params, caches, tokens_x, positions, cache_len, mask, ids, *, d: SliceDims, impl: str,
                  inv_freq, rope_mult, moe_opts=()):
  """tokens_x: [1, T, D] bf16 (the embedded block); caches: tuple of (ckv [1, S, R], kpe [1, S, P]) per layer;
  ids: [L_moe, T, top_k] int32. Returns (local argmax over the vocabulary shard [1, T], caches)."""
  cos, sin = rope_cos_sin(positions, inv_freq, rope_mult)
  x = tokens_x
  new = []
  dp = params["dense"]
  a, ckv, kpe = attention(dp["attn"], x, cos, sin, *caches[0], cache_len, mask, d, impl)
  new.append((ckv, kpe))
  x = x + a
  x = x + swiglu(rms_norm(x, dp["attn"]["post_norm"], d.eps), *dp["mlp"])
  for li, mp in enumerate(params["moe"]):
    a, ckv, kpe = attention(mp["attn"], x, cos, sin, *caches[li + 1], cache_len, mask, d, impl)
    new.append((ckv, kpe))
    x = x + a
    t = x.shape[1]
    h = rms_norm(x, mp["attn"]["post_norm"], d.eps).reshape(t, d.hidden)
    x = x + moe(mp, h, ids[li], d, impl, moe_opts).reshape(x.shape)
  logits = (rms_norm(x, params["final_norm"], d.eps) @ params["lm_head"]).astype(jnp.float32)
  return jnp.argmax(logits, axis=-1), tuple(new)


# ---- routing, trees, accounting ---------------------------------------------------------------------

def routing(rng: np.random.Generator, t: int, d: SliceDims, kind: str, zipf_s: float = 1.0):
  """[T, top_k] distinct expert ids per token over all experts. 'random': uniform; 'zipf': expert of
  popularity rank r has weight 1/(r+1)^s, ranks assigned to expert ids by a fixed permutation (so this
  GPU's 48 experts are a random slice of the popularity order)."""
  e = d.experts_total
  if kind == "random":
    return np.stack([rng.choice(e, d.top_k, replace=False) for _ in range(t)]).astype(np.int32)
  perm = np.random.default_rng(1234).permutation(e)
  p = 1.0 / np.arange(1, e + 1) ** zipf_s
  p /= p.sum()
  return np.stack([perm[rng.choice(e, d.top_k, replace=False, p=p)] for _ in range(t)]).astype(np.int32)


def expected_distinct(n_tokens: int, d: SliceDims, local: bool = False) -> float:
  """E[distinct experts] under uniform routing: E (1 - (1 - k/E)^n) (per GPU: /mesh)."""
  v = d.experts_total * (1 - (1 - d.top_k / d.experts_total) ** n_tokens)
  return v / d.mesh if local else v


def random_tree_mask(rng: np.random.Generator, t: int):
  """A random tree over t tokens (node 0 the root, parent[i] < i): ancestor-or-self mask [1, t, t]."""
  parents = [-1] + [int(rng.integers(0, i)) for i in range(1, t)]
  anc = np.eye(t, dtype=bool)
  depth = np.zeros(t, np.int32)
  for i in range(1, t):
    anc[i] |= anc[parents[i]]
    depth[i] = depth[parents[i]] + 1
  return anc[None], depth


def accounting(d: SliceDims, t: int, ctx: int, local_distinct: list[int], local_pairs: list[int], moe_layers: int):
  """Bytes (fewest that must move) and FLOPs of one slice forward."""
  attn_w = d.attn_weight_bytes() * (1 + moe_layers)
  cache = (1 + moe_layers) * d.cache_token_bytes() * (ctx + 2 * t)      # read ctx + T, write T
  dense = d.dense_mlp_bytes()
  moe_fixed = moe_layers * (d.shared_bytes() + d.router_bytes())
  experts = sum(local_distinct) * d.expert_bytes()
  head = d.lm_head_bytes()
  byts = attn_w + cache + dense + moe_fixed + experts + head
  fl_attn_core = (1 + moe_layers) * d.attn_core_flops(t, ctx)
  fl_lin = ((1 + moe_layers) * d.attn_proj_flops(t) + 2 * t * (dense + moe_fixed + head) // 2)
  fl_exp = d.expert_flops(sum(local_pairs))
  return dict(bytes=int(byts), bytes_attn_weights=int(attn_w), bytes_cache=int(cache), bytes_dense=int(dense),
              bytes_moe_fixed=int(moe_fixed), bytes_experts=int(experts), bytes_lm_head=int(head),
              flops=int(fl_attn_core + fl_lin + fl_exp), flops_attn_core=int(fl_attn_core),
              flops_linear=int(fl_lin), flops_experts=int(fl_exp))


# ---- ceilings ---------------------------------------------------------------------------------------

def _median_time(fn, reps: int, warmup: int = 3):
  for _ in range(warmup):
    jax.block_until_ready(fn())
  ts = []
  for _ in range(reps):
    t0 = time.perf_counter()
    jax.block_until_ready(fn())
    ts.append(time.perf_counter() - t0)
  return statistics.median(ts), ts


def _pipelined_time(fn, reps: int, samples: int = 3):
  """Seconds per call with the host running ahead: `reps` calls enqueued back to back, one wait (median over
  `samples` such runs). Its host dispatch overlaps the device's previous call, as in the engine's loop of rounds,
  so this is the device's time per call when the device is the bottleneck (the blocking figure also carries
  the ~0.3-0.4 ms of host per call; issue 6 thirteenth round)."""
  jax.block_until_ready(fn())
  per_call = []
  for _ in range(samples):
    t0 = time.perf_counter()
    jax.block_until_ready([fn() for _ in range(reps)])
    per_call.append((time.perf_counter() - t0) / reps)
  return statistics.median(per_call)


def measure_ceilings(smoke: bool):
  n = (1 << 20) if smoke else (1 << 29)          # bf16 elements: 1 GiB per buffer on the GPU
  x = jax.random.normal(jax.random.key(0), (n,), jnp.float32).astype(jnp.bfloat16)
  copy = jax.jit(lambda a: a * jnp.bfloat16(1.0001))
  tc, _ = _median_time(lambda: copy(x), 5 if smoke else 20)
  copy_bw = 2 * n * 2 / tc
  m = 256 if smoke else 8192
  a = jax.random.normal(jax.random.key(1), (m, m), jnp.bfloat16)
  bm = jax.random.normal(jax.random.key(2), (m, m), jnp.bfloat16)
  mm = jax.jit(lambda a, b: a @ b)
  tm, _ = _median_time(lambda: mm(a, bm), 5 if smoke else 20)
  del x, a, bm
  return dict(copy_bytes_per_s=copy_bw, matmul_flops_per_s=2 * m ** 3 / tm, copy_elems=n, matmul_n=m)


# ---- the run ----------------------------------------------------------------------------------------

def make_caches(d: SliceDims, ctx: int, max_t: int, n_layers: int):
  """One (ckv [1, S, R], kpe [1, S, P]) bf16 pair per layer, random (never zero), S = ctx + max_t rounded up to a
  multiple of 128 like the engine's cache (the Mosaic kernel's need)."""
  cap = -(-(ctx + max_t) // 128) * 128
  k = jax.random.key(ctx)
  normal = lambda i, width: (0.5 * jax.random.normal(jax.random.fold_in(k, i), (1, cap, width), jnp.float32)
                             ).astype(jnp.bfloat16)
  return tuple((normal(2 * i, d.kv_lora), normal(2 * i + 1, d.rope)) for i in range(n_layers))


def step_inputs(d: SliceDims, rng: np.random.Generator, ctx: int, t: int):
  """(x [1, T, D] bf16, positions [1, T], cache_len [1], mask [1, T, T]) of an AR step (T = 1) or of a random
  tree of T tokens over `ctx` committed ones."""
  mask_np, depth = (np.ones((1, 1, 1), bool), np.zeros(1, np.int32)) if t == 1 else random_tree_mask(rng, t)
  positions = jnp.asarray((ctx + depth)[None], jnp.int32)
  x = _normal(jax.random.key(t), (1, t, d.hidden), std=1.0)
  return x, positions, jnp.asarray([ctx], jnp.int32), jnp.asarray(mask_np)


def forward_program(d: SliceDims, impl: str, inv_freq, rope_mult, moe_opts=()):
  """jit of slice_forward(params, caches, x, positions, cache_len, mask, ids), the caches donated."""
  return jax.jit(lambda p, c, x, pos, cl, m, ids: slice_forward(p, c, x, pos, cl, m, ids, d=d, impl=impl,
                                                                  inv_freq=inv_freq, rope_mult=rope_mult,
                                                                  moe_opts=moe_opts),
                 donate_argnums=(1,))


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU (for the test)")
  ap.add_argument("--moe_layers", type=int, default=3)
  ap.add_argument("--budgets", default="1,8,16,32,64,128,256", help="tree sizes N (T = N + 1); AR T=1 always")
  ap.add_argument("--contexts", default="4096,32768")
  ap.add_argument("--impls", default="pallas,xla",
                  help="kernel paths (pallas, xla, mosaic_moe); xla runs only at --xla_budgets, mosaic_moe up to "
                       f"T = {MOSAIC_MAX_TOKENS}")
  ap.add_argument("--mosaic_moe_opts", default="{}",
                  help='mosaic_moe: routed_experts_int4_mosaic options as JSON, e.g. \'{"wgmma_order": true}\'')
  ap.add_argument("--xla_budgets", default="0,64,256", help="N for the xla path (0 = the AR step)")
  ap.add_argument("--reps", type=int, default=15)
  ap.add_argument("--budget_s", type=float, default=190.0, help="stop starting programs after this many seconds")
  ap.add_argument("--layouts", default=MODEL_LAYOUT,
                  help=f"weight layouts of the kernel path, some of {list(LAYOUTS)} (the xla path: {MODEL_LAYOUT})")
  ap.add_argument("--out", default=None, help="JSON path (default $OUT/k26_slice.json or benchmarks/results/)")
  args = ap.parse_args(argv)
  layouts = [s for s in args.layouts.split(",") if s]
  for layout in layouts:
    if layout not in LAYOUTS:
      raise SystemExit(f"k26_slice: --layouts: unknown layout {layout!r}; expected some of {list(LAYOUTS)}")
  t_start = time.perf_counter()
  d = SMOKE if args.smoke else H200
  if args.smoke:   # tiny defaults unless given explicitly
    contexts = [64, 256] if args.contexts == ap.get_default("contexts") else [int(c) for c in args.contexts.split(",")]
    budgets = [1, 8] if args.budgets == ap.get_default("budgets") else [int(n) for n in args.budgets.split(",")]
    xla_budgets = [0] + budgets
    reps = 3
  else:
    contexts = [int(c) for c in args.contexts.split(",")]
    budgets = [int(n) for n in args.budgets.split(",")]
    xla_budgets = [int(n) for n in args.xla_budgets.split(",")]
    reps = args.reps
  impls = [s for s in args.impls.split(",") if s]
  if jax.default_backend() != "gpu":
    impls = ["xla" if s == "pallas" else s for s in impls]
    impls = list(dict.fromkeys(impls))
  out_path = args.out or os.path.join(os.environ.get("OUT") or "benchmarks/results", "k26_slice.json")
  os.makedirs(os.path.dirname(out_path) or ".", exist_ok=True)
  dev = jax.devices()[0]
  print(f"device: {dev.device_kind} ({jax.default_backend()}), jax {jax.__version__}; dims {'smoke' if args.smoke else 'K2.6 / 8'}",
        flush=True)

  ceil = measure_ceilings(args.smoke)
  print(f"ceilings: copy {ceil['copy_bytes_per_s'] / 1e12:.2f} TB/s, bf16 matmul {ceil['matmul_flops_per_s'] / 1e12:.0f} TFLOP/s",
        flush=True)

  t0 = time.perf_counter()
  params = init_params(jax.random.key(0), d, args.moe_layers)
  # the kernel path runs the experts in the layout the engine gives the GPU kernels, the XLA path as stored
  kernel_params, moe_k_chunk = kernel_layout_params(params, d) if "pallas" in impls else (params, None)
  params_by_impl = {("xla", MODEL_LAYOUT): params}
  if "pallas" in impls:
    params_by_impl.update({("pallas", layout): relayout_params(kernel_params, layout) for layout in layouts})
  mosaic_opts = json.loads(args.mosaic_moe_opts)
  if "mosaic_moe" in impls:
    mosaic_params = mosaic_layout_params(params, d, bool(mosaic_opts.get("wgmma_order")))
    params_by_impl.update({("mosaic_moe", layout): relayout_params(mosaic_params, layout) for layout in layouts})
  jax.block_until_ready(params_by_impl)
  init_s = time.perf_counter() - t0
  inv_freq, mult = rope_tables(d)
  n_layers = 1 + args.moe_layers
  max_t = max(budgets) + 1

  # Plan: (impl, ctx, T) in an order that covers the range early if the wall-clock guard trips.
  ts = [1] + [n + 1 for n in budgets]
  order = sorted(set(ts), key=lambda t: (t not in (1, max_t), t not in (65, 17), t))
  plan = []
  for impl in impls:
    for layout in (layouts if impl in ("pallas", "mosaic_moe") else [MODEL_LAYOUT]):
      for t in order:
        if impl == "xla" and (t - 1 if t > 1 else 0) not in xla_budgets:
          continue
        if impl == "mosaic_moe" and t > MOSAIC_MAX_TOKENS:
          continue
        for ctx in contexts:
          plan.append((impl, layout, ctx, t))

  rows, skipped = [], []
  caches_by_ctx = {}
  for impl, layout, ctx, t in plan:
    if time.perf_counter() - t_start > args.budget_s:
      skipped.append(dict(impl=impl, layout=layout, context=ctx, T=t))
      continue
    if ctx not in caches_by_ctx:
      caches_by_ctx.clear()   # one context's buffers alive at a time
      caches_by_ctx[ctx] = make_caches(d, ctx, max_t, n_layers)
    caches = caches_by_ctx[ctx]
    n = t - 1
    rng = np.random.default_rng([ctx, t])   # the same tree and routing for every layout of this (ctx, T)
    x, positions, cache_len, mask = step_inputs(d, rng, ctx, t)
    fn = forward_program(d, impl, inv_freq, mult,
                         moe_opts=tuple(sorted(mosaic_opts.items())) if impl == "mosaic_moe" else ())
    sd = jax.ShapeDtypeStruct
    mla_kernel = select_kernel(sd((1, t, d.heads, d.kv_lora), jnp.bfloat16), sd((1, t, d.heads, d.rope), jnp.bfloat16),
                               *(sd(c.shape, c.dtype) for c in caches[0]), sd((1,), jnp.int32), sd(mask.shape, bool),
                               impl=CUSTOM_CALL_IMPL[impl])
    routes = {kind: np.stack([routing(rng, t, d, kind) for _ in range(args.moe_layers)]) for kind in ("random", "zipf")}
    tc0 = time.perf_counter()
    params = params_by_impl[(impl, layout)]
    compiled = fn.lower(params, caches, x, positions, cache_len, mask, jnp.asarray(routes["random"])).compile()
    compile_s = time.perf_counter() - tc0
    for kind, ids_np in routes.items():
      ids = jnp.asarray(ids_np)
      state = {"c": caches}
      def call():
        out, state["c"] = compiled(params, state["c"], x, positions, cache_len, mask, ids)
        return out
      med, all_t = _median_time(call, reps)
      pipelined = _pipelined_time(call, reps)
      caches = state["c"]
      local = ids_np < d.experts
      local_distinct = [int(len(np.unique(l_ids[l_m]))) for l_ids, l_m in zip(ids_np, local)]
      local_pairs = [int(l_m.sum()) for l_m in local]
      total_distinct = [int(len(np.unique(l_ids))) for l_ids in ids_np]
      # the straggler GPU: the most distinct experts any of the mesh's GPUs touches in a layer
      per_gpu = [[len(np.unique(l_ids[(l_ids // d.experts) == g])) for g in range(d.mesh)] for l_ids in ids_np]
      acc = accounting(d, t, ctx, local_distinct, local_pairs, args.moe_layers)
      t_mem = acc["bytes"] / ceil["copy_bytes_per_s"]
      t_fl = acc["flops"] / ceil["matmul_flops_per_s"]
      roof = max(t_mem, t_fl)
      row = dict(impl=impl, layout=layout, mla_kernel=mla_kernel, moe_k_chunk=moe_k_chunk if impl == "pallas" else None,
                 moe_opts=mosaic_opts if impl == "mosaic_moe" else None,
                 context=ctx, T=t, N=n, mode="ar" if t == 1 else "verify",
                 routing=kind, layers=n_layers, moe_layers=args.moe_layers, time_s=med, times_s=all_t,
                 pipelined_s=pipelined,
                 compile_s=compile_s,
                 local_distinct=local_distinct, local_pairs=local_pairs, total_distinct=total_distinct,
                 max_gpu_distinct=[max(r) for r in per_gpu], **acc,
                 roofline_s=roof, roofline_mem_s=t_mem, roofline_flop_s=t_fl,
                 bound="memory" if t_mem >= t_fl else "compute", frac_roofline=roof / med,
                 frac_roofline_pipelined=roof / pipelined)
      rows.append(row)
      print(f"{impl:6s} ({mla_kernel}, {layout}) ctx {ctx:6d} T {t:4d} {kind:6s}: {med * 1e3:8.3f} ms "
            f"(pipelined {pipelined * 1e3:8.3f}) "
            f"(compile {compile_s:5.1f} s) "
            f"experts/layer local {np.mean(local_distinct):5.1f} all {np.mean(total_distinct):5.1f}  "
            f"roofline {roof * 1e3:.3f} ms ({row['bound']}) = {roof / med:.2f}", flush=True)
    caches_by_ctx[ctx] = caches
    _write(out_path, d, args, ceil, init_s, rows, skipped, t_start)

  _write(out_path, d, args, ceil, init_s, rows, skipped, t_start)
  print_table(rows, ceil, skipped)
  print(f"wrote {out_path} ({time.perf_counter() - t_start:.0f} s total)")
  return rows


def rope_tables(d: SliceDims):
  """(inv_freq f32 [rope/2], mscale) of K2.6's YaRN rope."""
  inv_freq, mult = yarn_inv_freq(d.rope, d.rope_theta, _yarn(d))
  return jnp.asarray(inv_freq, jnp.float32), mult


def _yarn(d: SliceDims):
  from ddtree_jax.config import RopeScaling
  return RopeScaling(type="yarn", factor=d.yarn_factor, original_max_position_embeddings=d.yarn_orig,
                     beta_fast=32.0, beta_slow=1.0, mscale=1.0, mscale_all_dim=1.0)


def _write(path, d, args, ceil, init_s, rows, skipped, t_start):
  dev = jax.devices()[0]
  doc = dict(date=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), device=dev.device_kind,
             backend=jax.default_backend(), jax=jax.__version__, host=platform.node(), smoke=args.smoke,
             dims=dataclasses.asdict(d), per_gpu=dict(heads=d.heads, experts=d.experts, dense_inter=d.dense_inter,
                                                      shared_inter=d.shared_inter, vocab=d.vocab,
                                                      expert_bytes=d.expert_bytes(),
                                                      attn_weight_bytes=d.attn_weight_bytes(),
                                                      cache_token_bytes=d.cache_token_bytes()),
             ceilings=ceil, init_s=init_s, model_layout=MODEL_LAYOUT, rows=rows, skipped=skipped,
             elapsed_s=time.perf_counter() - t_start, argv=sys.argv[1:])
  write_json(path, doc)


def print_table(rows, ceil, skipped):
  print(f"\nK2.6 one-GPU slice (1 dense + MoE layers, 8-way shard); ceilings copy "
        f"{ceil['copy_bytes_per_s'] / 1e12:.2f} TB/s, matmul {ceil['matmul_flops_per_s'] / 1e12:.0f} TFLOP/s")
  print("| impl | layout | ctx | T | routing | ms | pipelined ms | ms/layer | local experts/layer | MB moved | GFLOP | roofline ms | bound | frac |")
  print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
  for r in sorted(rows, key=lambda r: (r["impl"], r.get("layout", ""), r["context"], r["T"], r["routing"])):
    print(f"| {r['impl']} | {r.get('layout', MODEL_LAYOUT)} | {r['context']} | {r['T']} | {r['routing']} | {r['time_s'] * 1e3:.3f} | "
          f"{r.get('pipelined_s', float('nan')) * 1e3:.3f} | {r['time_s'] * 1e3 / r['layers']:.3f} | {np.mean(r['local_distinct']):.1f} | {r['bytes'] / 1e6:.0f} | "
          f"{r['flops'] / 1e9:.1f} | {r['roofline_s'] * 1e3:.3f} | {r['bound']} | {r['frac_roofline']:.2f} |")
  if skipped:
    print(f"skipped by the time guard: {len(skipped)} programs: {skipped}")


if __name__ == "__main__":
  main()
