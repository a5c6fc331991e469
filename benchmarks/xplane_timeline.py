"""The GPU kernels of a `jax.profiler` trace (an XSpace `.xplane.pb`), read without TensorFlow or xprof.

`jax.profiler.start_trace(dir)` / `stop_trace()` writes dir/plugins/profile/<run>/<host>.xplane.pb: an XSpace
protobuf (tsl/profiler/protobuf/xplane.proto) whose "/device:GPU:<n>" planes hold one line per CUDA stream and one
event per kernel or copy, timed by CUPTI on the device. This module decodes the few fields it needs straight from
the protobuf wire format (no generated code) and turns them into:

  kernels(path)   -> [(start_ns, duration_ns, name, stream)] of GPU 0 (or another plane), in start order
  calls(rows, gap_ns) -> the rows split wherever the device sat idle for more than gap_ns (one block per
                     program call when the calls were blocking and the host paused between them)
  summary(block)  -> span, busy time, idle time inside the span, kernel count
  by_name(rows)   -> [(name, count, total us)] longest total first (e.g. the host's events: --plane /host:CPU)
  record(run, trace_dir) -> runs run() under jax.profiler and copies its XSpace to <trace_dir>.xplane.pb

  python3 benchmarks/xplane_timeline.py TRACE_DIR_OR_FILE [--gap_us 40] [--top 25]

XSpace fields used: planes = 1; XPlane: name = 2, lines = 3, event_metadata = 4 (map int64 -> XEventMetadata,
name = 2); XLine: name = 2, timestamp_ns = 3, events = 4, display_name = 11; XEvent: metadata_id = 1,
offset_ps = 2, duration_ps = 3.
"""
from __future__ import annotations

import argparse
import glob
import os
import shutil
import statistics


def _varint(buf, i):
  shift = value = 0
  while True:
    b = buf[i]
    i += 1
    value |= (b & 0x7F) << shift
    if b < 0x80:
      return value, i
    shift += 7


def fields(buf):
  """Yield (field number, wire type, value) of one protobuf message; length-delimited values as memoryview."""
  i, n = 0, len(buf)
  while i < n:
    key, i = _varint(buf, i)
    num, wire = key >> 3, key & 7
    if wire == 0:
      value, i = _varint(buf, i)
    elif wire == 1:
      value, i = int.from_bytes(buf[i:i + 8], "little"), i + 8
    elif wire == 2:
      length, i = _varint(buf, i)
      value, i = buf[i:i + length], i + length
    elif wire == 5:
      value, i = int.from_bytes(buf[i:i + 4], "little"), i + 4
    else:
      raise ValueError(f"xplane_timeline: unsupported protobuf wire type {wire} (field {num}); not an XSpace file?")
    yield num, wire, value


def _plane(buf):
  name, lines, meta = "", [], {}
  for num, _, value in fields(buf):
    if num == 2:
      name = bytes(value).decode()
    elif num == 3:
      lines.append(value)
    elif num == 4:                                     # map entry: key = 1, value = 2 (XEventMetadata)
      key, md_name = 0, ""
      for n2, _, v2 in fields(value):
        if n2 == 1:
          key = v2
        elif n2 == 2:
          md_name = next((bytes(v3).decode() for n3, _, v3 in fields(v2) if n3 == 2), "")
      meta[key] = md_name
  return name, lines, meta


def kernels(path, plane="/device:GPU:0"):
  """[(start_ns, duration_ns, name, line name)] of the events of one plane (default GPU 0: one line per stream),
  sorted by start."""
  with open(path, "rb") as fh:
    buf = memoryview(fh.read())
  rows = []
  for num, _, plane_buf in fields(buf):
    if num != 1:
      continue
    name, lines, meta = _plane(plane_buf)
    if name != plane:
      continue
    for line in lines:
      line_name, ts_ns, events = "", 0, []
      for n2, _, v2 in fields(line):
        if n2 in (2, 11) and not line_name:
          line_name = bytes(v2).decode()
        elif n2 == 3:
          ts_ns = v2
        elif n2 == 4:
          events.append(v2)
      for ev in events:
        md = off = dur = 0
        for n3, _, v3 in fields(ev):
          if n3 == 1:
            md = v3
          elif n3 == 2:
            off = v3
          elif n3 == 3:
            dur = v3
        rows.append((ts_ns + off / 1e3, dur / 1e3, meta.get(md, str(md)), line_name))
  if not rows:
    raise ValueError(f"xplane_timeline: no events on plane {plane!r} in {path}")
  return sorted(rows)


def calls(rows, gap_ns=40e3):
  """Split time-ordered rows into blocks separated by more than gap_ns of device idle time."""
  blocks, end = [], None
  for row in rows:
    if end is None or row[0] - end > gap_ns:
      blocks.append([])
    blocks[-1].append(row)
    end = max(end or 0.0, row[0] + row[1])
  return blocks


def summary(block):
  """{span_us, busy_us (union of kernel intervals), idle_us, kernels}."""
  start = block[0][0]
  end = max(r[0] + r[1] for r in block)
  busy, cur_s, cur_e = 0.0, None, None
  for s, d, _, _ in block:
    if cur_e is None or s > cur_e:
      busy += (cur_e - cur_s) if cur_e is not None else 0.0
      cur_s, cur_e = s, s + d
    else:
      cur_e = max(cur_e, s + d)
  busy += cur_e - cur_s
  span = end - start
  return dict(span_us=span / 1e3, busy_us=busy / 1e3, idle_us=(span - busy) / 1e3, kernels=len(block))


def by_name(rows):
  """[(name, count, total duration us)], the longest total first."""
  totals = {}
  for _, dur, name, _ in rows:
    count, total = totals.get(name, (0, 0.0))
    totals[name] = (count + 1, total + dur / 1e3)
  return sorted(((n, c, t) for n, (c, t) in totals.items()), key=lambda r: -r[2])


def record(run, trace_dir):
  """run() under jax.profiler (its output in trace_dir); the XSpace is also copied to <trace_dir>.xplane.pb, one
  file next to the directory (easy to carry back from a GPU machine). Returns that copy's path."""
  import jax
  jax.profiler.start_trace(trace_dir)
  try:
    run()
  finally:
    jax.profiler.stop_trace()
  flat = trace_dir.rstrip("/") + ".xplane.pb"
  shutil.copy(find_trace(trace_dir), flat)
  return flat


def find_trace(path):
  if os.path.isfile(path):
    return path
  found = sorted(glob.glob(os.path.join(path, "**", "*.xplane.pb"), recursive=True))
  if not found:
    raise FileNotFoundError(f"xplane_timeline: no *.xplane.pb under {path}")
  return found[-1]


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("trace", help="an .xplane.pb file or a directory holding one (jax.profiler's output)")
  ap.add_argument("--gap_us", type=float, default=40.0, help="device idle time that separates two calls")
  ap.add_argument("--top", type=int, default=25, help="kernels listed for the last call (by duration)")
  ap.add_argument("--plane", default="/device:GPU:0", help="the XPlane to read (/host:CPU: the host's events)")
  ap.add_argument("--by_name", action="store_true", help="the device's kernels by name over the whole trace "
                  "(count, total us), instead of per call")
  a = ap.parse_args(argv)
  path = find_trace(a.trace)
  if a.by_name or not a.plane.startswith("/device:"):
    rows = kernels(path, a.plane)
    print(f"{path}, plane {a.plane}: {len(rows)} events; by name (count, total us):")
    for name, count, total in by_name(rows)[:a.top]:
      print(f"  {total:10.1f}  {count:6d}  {name[:100]}")
    return rows
  blocks = calls(kernels(path, a.plane), a.gap_us * 1e3)
  print(f"{path}: {len(blocks)} calls")
  stats = [summary(b) for b in blocks]
  for i, s in enumerate(stats):
    print(f"call {i}: {s['kernels']} kernels, span {s['span_us']:.1f} us, busy {s['busy_us']:.1f}, "
          f"idle inside {s['idle_us']:.1f}")
  if len(stats) > 1:
    tail = stats[1:]
    print(f"median over calls 1..: span {statistics.median(s['span_us'] for s in tail):.1f} us, busy "
          f"{statistics.median(s['busy_us'] for s in tail):.1f}, idle {statistics.median(s['idle_us'] for s in tail):.1f}")
  last = blocks[-1]
  print(f"last call, {a.top} longest kernels (us): "
        + ", ".join(f"{n[:40]} {d / 1e3:.1f}" for _, d, n, _ in sorted(last, key=lambda r: -r[1])[:a.top]))
  return blocks


if __name__ == "__main__":
  main()
