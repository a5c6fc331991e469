"""MLA tree attention kernel in Pallas Mosaic GPU (seesaw layout, mosaic_gpu.py) against the XLA reference.

On the CPU the kernel runs under Mosaic GPU interpret mode (with its race detector) on small shapes, and the
GPU kernel is lowered for CUDA against an abstract H200 at a K2.6 per-GPU shape (which checks the shared
memory budget and the layouts, but does not compile it with ptxas nor run it). The tests marked gpu compile and
run it (and the impl="auto" dispatch) on a GPU.
"""
import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax._src.pallas.mosaic_gpu.interpret import gpu_callbacks  # private: race detector state

import custom_calls
from configs.tiny import tiny
from custom_calls.gpu_lowering import abstract_gpu_mesh
from custom_calls.mla_attention import MOSAIC_MIN_ROWS, mla_attention, select_kernel
from custom_calls.mla_attention.mosaic_gpu import (_mask_words, _mla_attention, default_num_splits, device_supported,
                                                   mla_attention_mosaic, supported)
from custom_calls.mla_attention.reference import mla_attention_reference, visibility_mask
from custom_calls.random_inputs import ancestor_masks
from ddtree_jax.model.mla import MLA
from ddtree_jax.model.rope import rope_cos_sin, yarn_inv_freq
from tests.kernel_checks import rel_err

SCALE = 0.0417  # about 1/sqrt(576)
R, P = 512, 64


def make_inputs(seed, b, t, h, s, cache_len=None):
  rng = np.random.default_rng(seed)
  ks = jax.random.split(jax.random.PRNGKey(seed), 4)
  q_lat = jax.random.normal(ks[0], (b, t, h, R), jnp.float32).astype(jnp.bfloat16)
  q_pe = jax.random.normal(ks[1], (b, t, h, P), jnp.float32).astype(jnp.bfloat16)
  ckv = jax.random.normal(ks[2], (b, s, R), jnp.float32).astype(jnp.bfloat16)
  kpe = jax.random.normal(ks[3], (b, s, P), jnp.float32).astype(jnp.bfloat16)
  if cache_len is None:
    cache_len = rng.integers(0, s - t + 1, size=b)                 # ragged per sequence
  cache_len = jnp.asarray(cache_len, jnp.int32)
  mask = jnp.asarray(ancestor_masks(rng, b, t))
  return q_lat, q_pe, ckv, kpe, cache_len, mask


def reference_f32(args):
  q_lat, q_pe, ckv, kpe, cache_len, mask = args
  f = lambda a: a.astype(jnp.float32)
  return mla_attention_reference(f(q_lat), f(q_pe), f(ckv), f(kpe), cache_len, mask, scale=SCALE)


def run_interpret(args, **opts):
  # Waits for the kernel: the race detector's state is final only then, and no other computation competes
  # for the CPU client's threads while the kernel's warpgroup threads need them (conftest.py, PJRT_NPROC).
  out = jax.block_until_ready(mla_attention_mosaic(*args, scale=SCALE, interpret=True, **opts))
  assert out.shape == args[0].shape and out.dtype == jnp.bfloat16
  assert not gpu_callbacks.get_races().races_found, "interpret mode found a race"
  return out


CASES = [
    # (seed, batch, T, H, S, cache_len, num_splits)
    (1, 1, 1, 8, 256, None, None),              # AR decode (one split by default)
    (2, 2, 5, 4, 256, None, None),              # tree, ragged cache_len
    (3, 1, 20, 8, 384, [301], 2),               # 3 row tiles, tail pairs cross the split boundary
    (11, 2, 20, 4, 384, [120, 250], 2),         # the new block crosses a pair boundary: mask tiles 2 and 3
]


@pytest.mark.parametrize("seed,b,t,h,s,cache_len,num_splits", CASES)
def test_matches_reference(seed, b, t, h, s, cache_len, num_splits):
  args = make_inputs(seed, b, t, h, s, cache_len)
  out = run_interpret(args, num_splits=num_splits)
  err = rel_err(out, reference_f32(args))
  print(f"rel_err {err:.2e}")
  assert err < 2e-2


@pytest.mark.parametrize("partial_dtype", ["float32", "bfloat16"])
def test_partial_dtypes(partial_dtype):
  """Both per-split output dtypes, with splits (one of them empty) and with one split (the kernel's output is the
  result, no combine)."""
  for seed, b, t, h, s, cache_len, num_splits in [(9, 2, 5, 4, 512, [100, 400], 3), (10, 1, 20, 8, 384, [301], 1)]:
    args = make_inputs(seed, b, t, h, s, cache_len)
    out = run_interpret(args, num_splits=num_splits, partial_dtype=partial_dtype)
    err = rel_err(out, reference_f32(args))
    print(f"{partial_dtype} splits {num_splits}: rel_err {err:.2e}")
    assert err < 2e-2


def test_splits_with_empty_split():
  """3 splits: sequence 0 has one pair of visible keys (splits 1, 2 empty), sequence 1 four (split 2 empty)."""
  args = make_inputs(4, 2, 5, 4, 512, cache_len=[100, 400])
  out = run_interpret(args, num_splits=3)
  err = rel_err(out, reference_f32(args))
  print(f"rel_err {err:.2e}")
  assert err < 2e-2


def test_empty_context_and_fully_masked_row():
  """cache_len 0 and S - T; a query whose mask row is all false (no key visible) gives zeros, not NaN."""
  b, t, h, s = 2, 6, 4, 256
  args = list(make_inputs(5, b, t, h, s, cache_len=[0, s - t]))
  mask = np.array(args[5])
  mask[0, 3, :] = False
  args[5] = jnp.asarray(mask)
  out = run_interpret(args, num_splits=2)
  ref = reference_f32(args)
  err = rel_err(out, ref)
  print(f"rel_err {err:.2e}")
  assert err < 2e-2
  np.testing.assert_array_equal(np.asarray(out[0, 3].astype(jnp.float32)), 0.0)


@pytest.mark.parametrize("b,t,h,s,cache_len", [(2, 20, 4, 384, [120, 250]), (1, 1, 64, 256, [255]),
                                                (2, 130, 8, 512, [0, 300])])
def test_mask_words_are_the_visibility_of_the_tail(b, t, h, s, cache_len):
  """Bit i of word [b, k, w, m] is the visibility of key 128 * (cache_len // 128) + 64k + 32w + i to row m
  (query m // H; rows past T x H see nothing), as reference.visibility_mask says."""
  rng = np.random.default_rng(t)
  cache_len = jnp.asarray(cache_len, jnp.int32)
  mask = jnp.asarray(ancestor_masks(rng, b, t))
  m_pad = -(-t * h // 64) * 64
  words = np.asarray(_mask_words(cache_len, mask, h, m_pad, s)).view(np.uint32)    # [B, NTB, 2, Mpad]
  assert words.shape[1] == 2 * -(-(127 + t) // 128)
  vis = np.asarray(visibility_mask(cache_len, mask, s))                            # [B, T, S]
  bits = (words[..., None] >> np.arange(32, dtype=np.uint32)) & 1                   # [B, NTB, 2, Mpad, 32]
  for bi in range(b):
    base = int(cache_len[bi]) // 128 * 128
    keys = base + np.arange(words.shape[1] * 64)                                    # the tail keys, in word order
    got = bits[bi].transpose(0, 1, 3, 2).reshape(-1, m_pad)                         # [NTB*64, Mpad]
    rows = np.arange(m_pad)
    want = np.zeros_like(got)
    ok_key = keys < s
    for m in rows[rows < t * h]:
      want[ok_key, m] = vis[bi, m // h, keys[ok_key]]
    np.testing.assert_array_equal(got, want)


def test_bad_inputs():
  args = make_inputs(6, 1, 2, 4, 256)
  with pytest.raises(ValueError, match="q_lat"):
    mla_attention_mosaic(args[0].astype(jnp.float32), *args[1:], scale=SCALE, interpret=True)
  with pytest.raises(ValueError, match="ckv"):
    mla_attention_mosaic(args[0], args[1], args[2].astype(jnp.float16), *args[3:], scale=SCALE, interpret=True)
  short = make_inputs(6, 1, 2, 4, 192)
  with pytest.raises(ValueError, match="multiple of 128"):
    mla_attention_mosaic(*short, scale=SCALE, interpret=True)
  with pytest.raises(ValueError, match="unknown combine 'XLA'"):                 # checked even with one split
    mla_attention_mosaic(*args, scale=SCALE, num_splits=1, combine="XLA", interpret=True)


def test_model_layer_tree_verify(monkeypatch):
  """One absorbed MLA layer of a model with K2.6's latent dims (R 512, P 64) in bf16 verifying a tree block on a
  ragged cache: the Mosaic kernel (interpret mode, through the dispatch) gives the XLA path's output and cache."""
  cfg = tiny(kv_lora_rank=R, qk_rope_head_dim=P, num_attention_heads=4)
  layer = MLA(cfg, dtype=jnp.bfloat16, rngs=nnx.Rngs(3))
  b, t, s = 2, 6, 256
  rng = np.random.default_rng(8)
  ks = jax.random.split(jax.random.PRNGKey(8), 3)
  x = jax.random.normal(ks[0], (b, t, cfg.hidden_size), jnp.float32).astype(jnp.bfloat16)
  ckv = jax.random.normal(ks[1], (b, s, R), jnp.float32).astype(jnp.bfloat16)      # committed context
  kpe = jax.random.normal(ks[2], (b, s, P), jnp.float32).astype(jnp.bfloat16)
  cache_len = jnp.asarray([37, 190], jnp.int32)
  # RoPE positions of the nodes (cache_len + a depth); both paths see the same ones
  positions = cache_len[:, None] + jnp.asarray(np.minimum(np.arange(t), 3))[None, :]
  inv_freq, mult = yarn_inv_freq(cfg.qk_rope_head_dim, cfg.rope_theta, cfg.rope_scaling)
  cos, sin = rope_cos_sin(positions, jnp.asarray(inv_freq), mult)
  mask = jnp.asarray(ancestor_masks(rng, b, t))
  calls = []
  dispatch = custom_calls.mla_attention

  def run(impl):
    def attend(*args, **kw):
      calls.append(impl)
      return dispatch(*args, **kw, impl=impl)
    monkeypatch.setattr(custom_calls, "mla_attention", attend)
    # one program, waited for (see run_interpret)
    layer_fn = nnx.jit(lambda m, *a: m(*a, absorbed=True))
    return jax.block_until_ready(layer_fn(layer, x, cos, sin, ckv, kpe, cache_len, mask))

  out, ckv_k, kpe_k = run("mosaic_interpret")
  assert not gpu_callbacks.get_races().races_found, "interpret mode found a race"
  ref, ckv_r, kpe_r = run("xla")
  assert calls == ["mosaic_interpret", "xla"]
  np.testing.assert_array_equal(np.asarray(ckv_k, np.float32), np.asarray(ckv_r, np.float32))
  np.testing.assert_array_equal(np.asarray(kpe_k, np.float32), np.asarray(kpe_r, np.float32))
  err = rel_err(out, ref.astype(jnp.float32))
  print(f"rel_err {err:.2e}")
  assert err < 2e-2


def test_supported_shapes_and_default_splits():
  sd = jax.ShapeDtypeStruct
  bf = jnp.bfloat16
  k26 = (sd((1, 4, 16, R), bf), sd((1, 4, 16, P), bf), sd((1, 1024, R), bf), sd((1, 1024, P), bf))
  assert supported(*k26)
  assert not supported(sd((1, 4, 16, 256), bf), *k26[1:])                       # R must be 512
  assert not supported(*k26[:2], sd((1, 1000, R), bf), sd((1, 1000, P), bf))  # S must be a multiple of 128
  assert not supported(*(sd(x.shape, jnp.float32) for x in k26))              # bf16 only
  assert MOSAIC_MIN_ROWS == 64
  # one CTA per SM, at most one wave of 132, at least one key pair (128 keys) a split
  assert default_num_splits(8, 16 * 64, 4096) == 1           # 128 row tiles
  assert default_num_splits(1, 64 * 8, 32768) == 16          # 8 row tiles
  assert default_num_splits(1, 64, 131072) == 132
  assert default_num_splits(1, 64, 1024) == 8                # capped by the 8 key pairs


def test_device_supported_only_on_hopper(monkeypatch):
  """The dispatch picks the Mosaic kernel only where every local device is an sm_90 GPU."""
  assert not device_supported()                                   # this CPU machine

  class FakeGpu:
    platform = "gpu"

    def __init__(self, cc):
      self.compute_capability = cc
  for devices, want in (([FakeGpu("9.0")] * 2, True), ([FakeGpu("12.0")], False), ([FakeGpu("8.0")], False),
                        ([FakeGpu("9.0"), FakeGpu("8.9")], False), ([], False)):
    monkeypatch.setattr(jax, "local_devices", lambda devices=devices: devices)
    assert device_supported() is want, devices


@pytest.mark.parametrize("b,t,h,r,s,want", [
    (1, 1, 64, R, 131072, "mosaic"),  # decode with 64 heads (H200, issue 6 round 9: 0.062 against 0.104 ms at 128K)
    (1, 257, 8, R, 1024, "mosaic"),   # a tree
    (4, 8, 8, R, 1024, "mosaic"),     # blocks of exactly 64 rows, 256 in the batch
    (2, 1, 64, R, 8192, "mosaic"),
    (1, 16, 8, R, 8192, "mosaic"),
    (1, 1, 64, R, 16384, "mosaic"),
    (1, 8, 8, R, 12416, "mosaic"),   # past 12K (a multiple of 128 keys: Mosaic supports it)
    (1, 24, 8, R, 2048, "mosaic"),    # 192 rows
    (1, 1, 64, R, 4096, "triton"),    # 64-128 rows in the batch over at most 4K keys (issue 6 round 40)
    (2, 1, 64, R, 4096, "triton"),
    (1, 8, 8, R, 1024, "triton"),
    (1, 16, 8, R, 2048, "triton"),
    (1, 1, 64, R, 8192, "triton"),    # 64 rows in the batch: up to 12K keys (round 41)
    (1, 8, 8, R, 12288, "triton"),
    (1, 4, 16, R, 8192, "triton"),
    (1, 1, 8, R, 1024, "triton"),     # decode with 8 heads: one 64-row tile would be 7/8 padding
    (1, 7, 8, R, 1024, "triton"),     # 56 rows
    (1, 1, 64, 256, 8192, "triton"),  # not K2.6's latent dims: Mosaic does not support them
])
def test_auto_dispatch_rule(monkeypatch, b, t, h, r, s, want):
  """impl="auto" on an (as if) Hopper GPU: Mosaic from MOSAIC_MIN_ROWS query rows (T x H) on, Triton below and
  for at most 128 rows in the batch over a buffer of at most 4K keys, 12K at 64 rows in the batch
  (pallas_triton.is_short_wide_decode)."""
  from custom_calls.mla_attention import mosaic_gpu, pallas_triton
  calls = []
  monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
  monkeypatch.setattr(mosaic_gpu, "device_supported", lambda: True)
  monkeypatch.setattr(mosaic_gpu, "mla_attention_mosaic", lambda *a, **kw: calls.append("mosaic"))
  monkeypatch.setattr(pallas_triton, "mla_attention_pallas", lambda *a, **kw: calls.append("triton"))
  sd = jax.ShapeDtypeStruct
  args = (sd((b, t, h, r), jnp.bfloat16), sd((b, t, h, P), jnp.bfloat16), sd((b, s, r), jnp.bfloat16),
          sd((b, s, P), jnp.bfloat16), sd((b,), jnp.int32), sd((b, t, t), jnp.bool_))
  mla_attention(*args, scale=SCALE, impl="auto")
  assert calls == [want]
  assert select_kernel(*args, impl="auto") == {"mosaic": "mosaic", "triton": "pallas"}[want]


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="the CPU fallback: runs where the backend is not a GPU")
def test_auto_dispatch_off_gpu_is_the_reference():
  """On the CPU backend impl="auto" is the XLA reference, even at shapes the Mosaic kernel supports."""
  sd = jax.ShapeDtypeStruct
  args = (sd((1, 257, 8, R), jnp.bfloat16), sd((1, 257, 8, P), jnp.bfloat16), sd((1, 1024, R), jnp.bfloat16),
          sd((1, 1024, P), jnp.bfloat16), sd((1,), jnp.int32), sd((1, 257, 257), jnp.bool_))
  assert select_kernel(*args, impl="auto") == "xla"
  assert select_kernel(*args, impl="mosaic_interpret") == "mosaic_interpret"
  with pytest.raises(ValueError, match="unknown impl"):
    select_kernel(*args, impl="triton")


def test_lowers_for_cuda_k26_shape():
  """The GPU kernel (register wgmma operands, RefUnions, reduction_scratch_bytes=0) fits an H200's smem."""
  b, t, h, s = 1, 257, 8, 4096
  sd = jax.ShapeDtypeStruct
  args = (sd((b, t, h, R), jnp.bfloat16), sd((b, t, h, P), jnp.bfloat16), sd((b, s, R), jnp.bfloat16),
          sd((b, s, P), jnp.bfloat16), sd((b,), jnp.int32), sd((b, t, t), jnp.bool_))
  num_splits = default_num_splits(b, t * h, s)
  assert num_splits == 4                                         # 33 row tiles x 4 splits ~ one H200 wave
  with jax.sharding.use_abstract_mesh(abstract_gpu_mesh()):
    lowered = _mla_attention.trace(*args, scale=SCALE, num_splits=num_splits, interpret=False).lower(
        lowering_platforms=("cuda",))
  assert "mosaic_gpu" in lowered.as_text()


@pytest.mark.gpu
@pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a GPU backend (jax.default_backend() == 'gpu')")
@pytest.mark.parametrize("b,t,h,s", [(1, 257, 8, 4096), (1, 64, 64, 2048), (2, 1, 8, 8192)])
def test_gpu_matches_reference(b, t, h, s):
  """The compiled kernel (register wgmma operands, RefUnions, TMA) on the GPU, at K2.6 per-GPU head counts."""
  args = make_inputs(7 + t, b, t, h, s)
  out = mla_attention_mosaic(*args, scale=SCALE)
  assert rel_err(out, reference_f32(args)) < 2e-2


@pytest.mark.gpu
@pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a GPU backend (jax.default_backend() == 'gpu')")
def test_gpu_kernel_does_not_spill():
  """ptxas's report for the compiled kernel shows no register spills. With them (wgmma descriptors hoisted out of
  the key loop, see mosaic_gpu._opaque_zero) the kernel ran 1.5x slower on the H200. A fresh process, so that the
  kernel is compiled there with MOSAIC_GPU_DUMP_PTXAS set."""
  script = ("import sys; sys.path.insert(0, 'tests'); import test_kernels_mla_mosaic as t; "
            "a = t.make_inputs(1, 1, 33, 8, 1280); "
            "print('rel_err', t.rel_err(t.mla_attention_mosaic(*a, scale=t.SCALE), t.reference_f32(a)))")
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  # This process (XLA preallocates 75% of the card) still holds its memory: the child takes only what it needs.
  env = dict(os.environ, MOSAIC_GPU_DUMP_PTXAS="1", PYTHONPATH=root, XLA_PYTHON_CLIENT_PREALLOCATE="false")
  env.pop("JAX_COMPILATION_CACHE_DIR", None)      # a cached executable would skip ptxas and its report
  run = subprocess.run([sys.executable, "-c", script], cwd=root, env=env, capture_output=True, text=True, timeout=600)
  assert run.returncode == 0, run.stderr[-3000:]
  reports = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", run.stdout + run.stderr)
  assert reports, f"no ptxas report in the output: {(run.stdout + run.stderr)[-3000:]}"
  assert all(stores == "0" and loads == "0" for stores, loads in reports), reports


@pytest.mark.gpu
@pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a GPU backend (jax.default_backend() == 'gpu')")
@pytest.mark.parametrize("partial_dtype", ["float32", "bfloat16"])
def test_gpu_partial_dtypes_match_reference(partial_dtype):
  """Both per-split output dtypes compiled for the GPU, split and unsplit."""
  for b, t, h, s, num_splits in [(1, 257, 8, 4096, None), (2, 16, 8, 2048, 1)]:
    args = make_inputs(11 + t, b, t, h, s)
    out = mla_attention_mosaic(*args, scale=SCALE, num_splits=num_splits, partial_dtype=partial_dtype)
    assert rel_err(out, reference_f32(args)) < 2e-2


@pytest.mark.gpu
@pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a GPU backend (jax.default_backend() == 'gpu')")
@pytest.mark.parametrize("b,t,h", [(4, 8, 8), (2, 1, 8), (4, 1, 64), (1, 1, 64), (2, 8, 8), (1, 16, 8)])
def test_gpu_dispatch_matches_reference(b, t, h):
  """impl="auto": the Mosaic kernel from 64 query rows (T x H) on past 128 in the batch, 8-head decode and 64-128
  rows in the batch over 2K keys (16-row blocks, bf16 partials) on the Triton kernel (all checked here)."""
  kind = jax.devices()[0].device_kind
  if any(hopper in kind for hopper in ("H100", "H200", "H800", "H20")):
    assert device_supported(), f"{kind}: the dispatch would not pick the Mosaic kernel"
  args = make_inputs(30 + t * h, b, t, h, 2048)
  out = mla_attention(*args, scale=SCALE, impl="auto")
  assert rel_err(out, reference_f32(args)) < 2e-2
