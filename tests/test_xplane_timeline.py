"""benchmarks/xplane_timeline.py decodes an XSpace protobuf: a synthetic one built here in the wire format (a GPU
plane with two stream lines), and a real jax.profiler trace of a CPU program recorded by xplane_timeline.record."""
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import xplane_timeline as xt  # noqa: E402


def _varint(v):
  out = bytearray()
  while True:
    out.append((v & 0x7F) | (0x80 if v > 0x7F else 0))
    v >>= 7
    if not v:
      return bytes(out)


def _field(num, value):
  if isinstance(value, int):
    return _varint(num << 3) + _varint(value)
  value = value.encode() if isinstance(value, str) else value
  return _varint(num << 3 | 2) + _varint(len(value)) + value


def _space():
  meta = {7: "fusion_a", 9: "gemv_kernel"}
  md = b"".join(_field(4, _field(1, k) + _field(2, _field(1, k) + _field(2, n))) for k, n in meta.items())
  event = lambda mid, off_ns, dur_ns: _field(4, _field(1, mid) + _field(2, off_ns * 1000) + _field(3, dur_ns * 1000))
  # stream 1: call one's two kernels, then call two after a 100-us pause; stream 2: one kernel overlapping call one
  line1 = _field(2, "Stream #1") + _field(3, 1_000) + event(7, 0, 5_000) + event(9, 6_000, 2_000) + event(7, 108_000, 4_000)
  line2 = _field(2, "Stream #2") + _field(3, 3_000) + event(9, 0, 4_000)
  gpu = _field(2, "/device:GPU:0") + _field(3, line1) + _field(3, line2) + md
  host = _field(2, "/host:CPU") + _field(3, _field(2, "python") + event(7, 0, 1))
  return _field(1, host) + _field(1, gpu)


def test_synthetic_space_gives_the_kernels_calls_and_idle_time(tmp_path):
  path = tmp_path / "t.xplane.pb"
  path.write_bytes(_space())
  rows = xt.kernels(str(path))
  assert [(s, d, n, line) for s, d, n, line in rows] == [
      (1_000, 5_000, "fusion_a", "Stream #1"), (3_000, 4_000, "gemv_kernel", "Stream #2"),
      (7_000, 2_000, "gemv_kernel", "Stream #1"), (109_000, 4_000, "fusion_a", "Stream #1")]
  blocks = xt.calls(rows, gap_ns=40e3)
  assert [len(b) for b in blocks] == [3, 1]
  s = xt.summary(blocks[0])          # [1, 6) and [3, 7) overlap, then [7, 9): busy 8 us of an 8-us span
  assert (s["span_us"], s["busy_us"], s["idle_us"], s["kernels"]) == (8.0, 8.0, 0.0, 3)
  assert xt.find_trace(str(tmp_path)) == str(path)
  with pytest.raises(ValueError, match="no events on plane"):
    xt.kernels(str(path), plane="/device:GPU:1")
  assert xt.by_name(rows) == [("gemv_kernel", 2, 6.0), ("fusion_a", 2, 9.0)][::-1]
  assert xt.main([str(path), "--by_name"]) == rows          # the device's kernels by name over the whole trace


def test_a_real_cpu_trace_decodes(tmp_path):
  import jax
  import jax.numpy as jnp
  f = jax.jit(lambda x: jnp.sin(x) @ x)
  x = jnp.ones((64, 64))
  f(x).block_until_ready()
  flat = xt.record(lambda: [f(x).block_until_ready() for _ in range(2)], str(tmp_path / "trace"))
  assert flat == str(tmp_path / "trace.xplane.pb")
  rows = xt.kernels(flat, plane="/host:CPU")
  assert any("PjitFunction" in name for _, _, name, _ in rows)
