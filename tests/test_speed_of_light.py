"""benchmarks/speed_of_light.py: its read-only kernels compute the sums their XLA references say (Pallas
interpreter, tiny shapes), so the GPU timings are of kernels that really read every byte counted."""
import functools
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import kernels as kb  # noqa: E402
import speed_of_light as sol  # noqa: E402

E, D, I = 4, 256, 128


@pytest.fixture(scope="module")
def moe_args():
  return kb.moe_inputs(3, 2, E, D, I)       # 2 tokens, one local expert each (column 0), the rest remote


@pytest.mark.parametrize("tokens", [1, 2])   # 8 pairs: straight-line visits; 16: the loops (UNROLL_MAX_PAIRS)
@pytest.mark.parametrize("variant", sol.MOE_VARIANTS)
def test_moe_read_matches_reference(moe_args, variant, tokens):
  x, ids, _w, *experts = moe_args
  x, ids = x[:tokens], ids[:tokens]
  cfg = sol.moe_shape(smoke=True)[4][0]
  got = np.asarray(jax.jit(functools.partial(sol.moe_read, variant=variant, cfg=cfg, interpret=True))(
      x, ids, *experts))
  want = np.asarray(sol.moe_read_reference(x, ids, *experts, variant=variant))
  assert got.shape == (tokens, D) and np.all(np.isfinite(got))
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
  # the check can tell the variants apart: read_1 does not read the first part's output, the others do
  other = np.asarray(sol.moe_read_reference(x, ids, *experts, variant="read_1" if variant != "read_1" else "read_2"))
  assert np.max(np.abs(other - want)) > 1e-2


def test_xla_read_sums_the_local_experts(moe_args):
  x, ids, _w, *experts = moe_args
  got = np.asarray(jax.jit(sol.xla_read)(x, ids, *experts))
  want = []
  for t in range(2):
    e = int(ids[t, 0])
    total = float(x[t, 0])
    for a in experts:
      part = jnp.sum(a[e].astype(jnp.int32)) if a.dtype == jnp.int32 else jnp.sum(a[e].astype(jnp.float32))
      total += float(part)
    want.append(total)
  np.testing.assert_allclose(got, want, rtol=1e-5)


def test_mla_read_matches_reference():
  q_lat, _qpe, ckv, kpe, _cl, _mask = kb.mla_inputs(5, 1, 1, 8, 512, 64, 32)
  got = np.asarray(jax.jit(functools.partial(sol.mla_read, num_splits=4, combine=False, interpret=True))(
      q_lat, ckv, kpe))
  want = np.asarray(sol.mla_read_reference(q_lat, ckv, kpe, num_splits=4))
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
  combined = np.asarray(jax.jit(functools.partial(sol.mla_read, num_splits=4, combine=True, interpret=True))(
      q_lat, ckv, kpe))
  assert combined.shape == (1, 16, 64) and np.all(np.isfinite(combined))
  with pytest.raises(ValueError, match="splits of whole"):
    sol.mla_read(q_lat, ckv, kpe, num_splits=3, combine=False, interpret=True)


def test_table_gives_the_device_busy_time_next_to_the_chained_figure(monkeypatch):
  """time_variant records the chained figure, and with --device_span (kb.DEVICE_SPAN_CALLS) the device busy time
  and span of blocking calls and the busy time of queued ones too (device_span.py's trace replaced here: it needs a
  GPU); the table prints the chained and busy times with their fractions of bytes / copy_bw."""
  import device_span
  monkeypatch.setattr(kb, "timeit", lambda fn, sets: 20e-6)
  def fake_device_span(fn, sets, n, queued=False, kernels_per_call=None):   # blocking calls, then the same queued
    return dict(span_s=12.5e-6, busy_s=9e-6 if queued else 11e-6, n_kernels=2, split="modules")
  monkeypatch.setattr(device_span, "device_span", fake_device_span)
  row = dict(kind="moe", tokens=1, experts_hit=1, bytes=10_000_000, harness_s=4e-6, times_s={}, errors={})
  monkeypatch.setattr(kb, "DEVICE_SPAN_CALLS", 3)
  sol.time_variant(row, "read_1", None, [])
  monkeypatch.setattr(kb, "DEVICE_SPAN_CALLS", 0)
  sol.time_variant(row, "read_2", None, [])
  assert row["times_s"] == {"read_1": 20e-6, "read_2": 20e-6} and row["device_span_s"] == {"read_1": 12.5e-6}
  assert row["device_busy_s"] == {"read_1": 11e-6} and row["device_busy_queued_s"] == {"read_1": 9e-6}
  assert row["device_split"] == {"read_1": "modules"} and "device_queued_error" not in row
  line = sol.table([row], copy_bw=1e12)                 # roofline 10 us
  assert "read_1 20.0 us (0.50), busy 11.0 us (0.91)" in line and "read_2 20.0 us (0.50) " in line + " "


@pytest.mark.parametrize("variant", ["read_1_flags", "read_1_flags_volatile"])
def test_flags_are_set_by_an_exchange_on_the_gpu(variant):
  """The interpreter runs the discharge rules, not the Triton lowering: lowered for an abstract H200, the flags of
  grid_sync.arrive_and_broadcast are set by an integer exchange, and no integer atomic is lowered as a float add
  (round 32: an int32 vector add lowered as `fadd` left every flag 0 on the GPU)."""
  from tests.kernel_checks import triton_modules_for_h200
  S = jax.ShapeDtypeStruct
  cfg = sol.moe_shape(smoke=True)[4][0]
  experts = []
  for rows, cols in ((I, D), (I, D), (D, I)):
    experts += [S((E, rows, cols // 8), jnp.int32), S((E, rows, cols // 32), jnp.bfloat16)]
  asm = triton_modules_for_h200(functools.partial(sol.moe_read, variant=variant, cfg=cfg),
                                S((1, D), jnp.bfloat16), S((1, 8), jnp.int32), *experts)
  assert len(asm) == 1
  assert any("atomic_rmw exch" in line and "ptr<i32>" in line for line in asm[0].splitlines())

