"""benchmarks/k26_slice.py --smoke runs on the CPU and writes its JSON (the GPU run is the real one)."""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))


def test_smoke(tmp_path):
  import k26_slice
  out = tmp_path / "k26.json"
  rows = k26_slice.main(["--smoke", "--moe_layers", "1", "--contexts", "64", "--budgets", "8", "--out", str(out)])
  doc = json.load(open(out))
  assert doc["smoke"] and len(doc["rows"]) == len(rows) >= 4
  r = rows[-1]
  assert r["time_s"] > 0 and r["pipelined_s"] > 0 and r["bytes"] > 0 and r["flops"] > 0 and r["roofline_s"] > 0
  assert {x["routing"] for x in rows} == {"random", "zipf"}
  assert {x["mla_kernel"] for x in rows} == {"xla"}       # the CPU: the dispatch's fallback, recorded per row


def test_accounting_k26():
  import k26_slice
  d = k26_slice.H200
  assert (d.heads, d.experts, d.vocab) == (8, 48, 20480)
  assert abs(d.expert_bytes() - 24.8e6) < 0.1e6          # REFERENCE: 24.8 MB per INT4 expert
  assert d.attn_core_flops(257, 32768 - 257) * 8 == 2 * 257 * 64 * 32768 * 1088


def test_weight_layouts_compute_the_same_forward():
  """Every LAYOUTS entry stores the same weights differently: the slice's forward agrees with the model's layout."""
  import jax
  import numpy as np
  import k26_slice as ks
  d = ks.SMOKE
  params = ks.init_params(jax.random.key(1), d, 1)
  inv_freq, mult = ks.rope_tables(d)
  rng = np.random.default_rng(0)
  x, positions, cache_len, mask = ks.step_inputs(d, rng, 64, 5)
  ids = jax.numpy.asarray(np.stack([ks.routing(rng, 5, d, "random")]))

  def run(layout):
    p = ks.relayout_params(params, layout)
    fn = jax.jit(lambda p, c: ks.slice_forward(p, c, x, positions, cache_len, mask, ids, d=d, impl="xla",
                                               inv_freq=inv_freq, rope_mult=mult))
    argmax, caches = fn(p, ks.make_caches(d, 64, 5, 2))
    return np.asarray(argmax), [np.asarray(c, np.float32) for pair in caches for c in pair]

  base_argmax, base_caches = run(ks.MODEL_LAYOUT)
  for layout in ks.LAYOUTS:
    argmax, caches = run(layout)
    assert (argmax == base_argmax).all(), layout
    for a, b in zip(caches, base_caches):
      np.testing.assert_allclose(a, b, rtol=2e-2, atol=2e-2)
  p = ks.relayout_params(params, "nk_qkv")
  assert "qkv_a" in p["moe"][0]["attn"] and "q_a" not in p["moe"][0]["attn"]
  assert p["moe"][0]["shared_gate_up_nk"].shape == (2 * d.shared_inter, d.hidden)
  import pytest
  with pytest.raises(ValueError, match="unknown layout"):
    ks.relayout_params(params, "mn")


def test_mosaic_moe_path_matches_the_reference_path():
  """impl "mosaic_moe" (the Mosaic GPU expert kernels, interpret mode on the CPU, experts in their layout) gives the
  slice's MoE block of the XLA path, with and without wgmma_order."""
  import jax
  import numpy as np
  import k26_slice as ks
  from tests.kernel_checks import rel_err
  d = ks.SMOKE
  params = ks.init_params(jax.random.key(2), d, 1)
  rng = np.random.default_rng(3)
  x = jax.random.normal(jax.random.key(4), (5, d.hidden), jax.numpy.bfloat16)
  ids = jax.numpy.asarray(ks.routing(rng, 5, d, "random"))
  assert 0 < int((ids < d.experts).sum()) < ids.size                  # some pairs local, some on other GPUs
  ref = ks.moe(params["moe"][0], x, ids, d, "xla")
  for order in (False, True):
    mosaic = ks.mosaic_layout_params(params, d, order)["moe"][0]
    out = ks.moe(mosaic, x, ids, d, "mosaic_moe", (("wgmma_order", order),))
    assert rel_err(out, np.asarray(ref, np.float32)) < 2e-2
