"""benchmarks/device_span.py's per-call statistics, on rows like xplane_timeline.kernels' (the trace itself needs a
GPU; kernels.py --device-span runs it there)."""
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import device_span  # noqa: E402


def _call(t0_ns, gate_us, down_us, gap_us=2.0):
  """One call: two kernels on stream 1 with a launch gap between them, and the module's derived line above."""
  gate_end = t0_ns + gate_us * 1e3
  down_start = gate_end + gap_us * 1e3
  return [(t0_ns, gate_us * 1e3, "gate_up", "Stream #1"), (down_start, down_us * 1e3, "down", "Stream #1"),
          (t0_ns - 500.0, (gate_us + gap_us + down_us) * 1e3 + 1e3, "jit_moe", "XLA Modules")]


def test_span_busy_and_each_kernels_median():
  rows = sorted(_call(0.0, 10.0, 5.0) + _call(1e6, 12.0, 4.0) + _call(2e6, 11.0, 6.0, gap_us=3.0))
  got = device_span.span_stats(rows, 3, gap_us=100.0)
  assert got["span_s"] == pytest.approx(18e-6)          # spans 17, 18, 20 us: the derived line is not counted
  assert got["busy_s"] == pytest.approx(16e-6)          # busy 15, 16, 17 us
  assert got["n_kernels"] == 2 and got["split"] == "modules"
  assert got["kernels"] == [("gate_up", pytest.approx(11.0)), ("down", pytest.approx(5.0))]


def test_wrong_number_of_calls_is_an_error():
  rows = sorted(_call(0.0, 10.0, 5.0) + _call(1e6, 12.0, 4.0))
  with pytest.raises(ValueError, match="splits into 2 blocks at gaps > 100.0 us, expected 3 calls"):
    device_span.span_stats(rows, 3, gap_us=100.0)
  streams_only = [r for r in rows if r[3] != "XLA Modules"]
  with pytest.raises(ValueError, match="splits into 4 blocks"):     # no module events: a gap inside a call longer
    device_span.span_stats(streams_only, 2, gap_us=1.0)            # than gap_us splits it


def test_module_events_keep_a_call_whole_across_a_long_launch_gap():
  """Where the trace has one "XLA Modules" event per call, the kernels go to the call that started before them,
  so that a host launch gap inside a call (round 32: one of 100+ us) does not split it."""
  rows = sorted(_call(0.0, 10.0, 5.0, gap_us=150.0) + _call(1e6, 12.0, 4.0))
  got = device_span.span_stats(rows, 2, gap_us=100.0)
  assert got["busy_s"] == pytest.approx(15.5e-6)        # busy 15 and 16 us; the gap is not busy time
  assert got["span_s"] == pytest.approx((165 + 18) / 2 * 1e-6)
  assert got["kernels"] == [("gate_up", pytest.approx(11.0)), ("down", pytest.approx(4.5))]


def test_calls_with_different_kernels_give_no_per_kernel_list():
  rows = sorted(_call(0.0, 10.0, 5.0) + [(1e6, 3e3, "other", "Stream #1")])
  got = device_span.span_stats(rows, 2, gap_us=100.0)
  assert got["split"] == "gaps"                          # one module event for two calls: cut at the gaps
  assert "kernels" not in got and got["n_kernels"] == pytest.approx(1.5)


def test_device_span_warms_up_then_cycles_the_argument_sets(monkeypatch):
  """The glue around the trace (which needs a GPU): every set is run once before the trace, the traced calls cycle
  through the sets, and the trace's rows are what span_stats reads."""
  import jax
  import jax.numpy as jnp
  seen = []

  def fn(x):
    jax.debug.callback(lambda v: seen.append(float(v[0])), x)
    return x * 2.0

  traced = {}

  def fake_record(run, trace_dir):
    traced["before"] = list(seen)
    run()
    traced["during"] = seen[len(traced["before"]):]
    return "trace.xplane.pb"

  rows = sorted(sum((_call(i * 1e6, 10.0 + i, 5.0) for i in range(5)), []))
  monkeypatch.setattr(device_span.xplane_timeline, "record", fake_record)
  monkeypatch.setattr(device_span.xplane_timeline, "kernels", lambda path: rows)
  sets = [(jnp.full((4,), float(i)),) for i in range(3)]
  got = device_span.device_span(fn, sets, n_calls=5, pause_s=0.0)
  assert traced["before"] == [0.0, 1.0, 2.0]
  assert traced["during"] == [0.0, 1.0, 2.0, 0.0, 1.0]
  assert got["span_s"] == pytest.approx(19e-6)          # spans 17..21 us


def test_queued_calls_are_cut_at_the_module_events_only(monkeypatch):
  """queued=True enqueues every call and waits once: back-to-back calls have no idle gap between them, so the
  trace's "XLA Modules" events cut them, or else the blocking calls' kernel count (runs of that many kernels whose
  names repeat); where neither does it is an error, not a figure."""
  import jax.numpy as jnp
  back_to_back = sorted(sum((_call(i * 16e3, 10.0, 4.0) for i in range(4)), []))   # 16-us calls, no idle gap
  monkeypatch.setattr(device_span.xplane_timeline, "record", lambda run, trace_dir: (run(), "trace.xplane.pb")[1])
  sets = [(jnp.ones((4,)),)]
  monkeypatch.setattr(device_span.xplane_timeline, "kernels", lambda path: back_to_back)
  got = device_span.device_span(lambda x: x * 2.0, sets, n_calls=4, queued=True)
  assert got["split"] == "modules" and got["busy_s"] == pytest.approx(14e-6)
  no_modules = [r for r in back_to_back if r[3] != "XLA Modules"]
  monkeypatch.setattr(device_span.xplane_timeline, "kernels", lambda path: no_modules)
  with pytest.raises(ValueError, match="splits into 1 blocks"):
    device_span.device_span(lambda x: x * 2.0, sets, n_calls=4, queued=True)
  # without module events, the blocking calls' kernel count cuts them: runs of 2 kernels, names repeating
  got = device_span.device_span(lambda x: x * 2.0, sets, n_calls=4, queued=True, kernels_per_call=2)
  assert got["split"] == "period" and got["busy_s"] == pytest.approx(14e-6)
  assert got["kernels"] == [("gate_up", pytest.approx(10.0)), ("down", pytest.approx(4.0))]
  with pytest.raises(ValueError, match="splits into 1 blocks"):          # 8 kernels are not 4 runs of 3
    device_span.device_span(lambda x: x * 2.0, sets, n_calls=4, queued=True, kernels_per_call=3)
