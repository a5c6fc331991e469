"""The device time of ONE call of a jitted function, read from a `jax.profiler` trace (CUPTI timestamps).

kernels.py's `timeit` figure is the time per call inside a chain: it holds the chain's own add + full reduction
around each call (its `harness_floor`, 3-7 us on an H100) and the launch gaps between them. For shapes whose
roofline is ~10 us that floor alone decides the fraction. This module measures what the call itself keeps the GPU
for: `calls` calls, cycling through the same rotating argument sets as the chain (so that one call's data is not in
L2 for the next), either blocking with a short host pause after each (every call starts on an idle GPU) or queued
back to back (`queued=True`: the chain's steady state, without its add and reduction), then per call

  busy    the union of its kernels' intervals: the GPU time the call's kernels take (the figure kernels.py and
          speed_of_light.py set against the roofline);
  span    first kernel's start to the last kernel's end, the gaps between its kernels included;
  kernels the call's kernels in order, each with its median duration.

Medians over the calls. The span is NOT the time a call costs in a program: a blocking call alone launches its
kernels one by one from the host, which the GPU outruns, so its gaps are host launch latency (round 32, H100: MoE at
1 token spans 47 us for 18 us busy, where the chain takes 20 us a call with its own add and reduction).
"""
from __future__ import annotations

import bisect
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import xplane_timeline  # noqa: E402


def span_stats(rows, n_calls, gap_us, kernels_per_call=None):
  """{span_s, busy_s, n_kernels, split, kernels: [(name, median us)]} of `rows` (xplane_timeline.kernels' rows of a
  trace holding exactly n_calls calls; only the lines named "Stream ..." where there are such). The calls are the
  "XLA Modules" line's events where it has n_calls of them; else, given kernels_per_call K, runs of K kernels where
  the stream lines hold n_calls * K kernels whose names repeat every K; else blocks separated by more than gap_us
  of device idle time (split: "modules", "period" or "gaps", which one cut them). Raises ValueError when the rows
  do not split into n_calls calls (another program ran, or a call had a gap longer than gap_us inside). "kernels"
  only when every call ran the same ones."""
  streams = [r for r in rows if r[3].startswith("Stream")]
  modules = sorted(r for r in rows if r[3] == "XLA Modules")
  rows = streams or rows        # the CUDA streams' lines, not lines derived from them (e.g. "XLA Modules")
  stream_names = [r[2] for r in streams]
  k = kernels_per_call
  periodic = (bool(k) and len(streams) == n_calls * k
              and all(name == stream_names[i % k] for i, name in enumerate(stream_names)))
  split = "modules" if streams and len(modules) == n_calls else "period" if periodic else "gaps"
  if split == "period":
    blocks = [streams[i * k:(i + 1) * k] for i in range(n_calls)]
  elif split == "modules":
    # one "XLA Modules" event per call: each kernel belongs to the last call that started before it (robust to a
    # long launch gap inside a call, which the blocking calls' host side can make: round 32 saw one of 100+ us)
    blocks = [[] for _ in modules]
    starts = [m[0] for m in modules]
    for r in streams:
      i = max(bisect.bisect_right(starts, r[0]) - 1, 0)
      blocks[i].append(r)
    blocks = [b for b in blocks if b]
  else:
    blocks = xplane_timeline.calls(rows, gap_us * 1e3)
  if len(blocks) != n_calls:
    raise ValueError(f"device_span: the trace splits into {len(blocks)} blocks at gaps > {gap_us} us, expected "
                     f"{n_calls} calls (a kernel of another program, or an idle gap inside one call)")
  stats = [xplane_timeline.summary(b) for b in blocks]
  out = dict(span_s=statistics.median(s["span_us"] for s in stats) * 1e-6,
             busy_s=statistics.median(s["busy_us"] for s in stats) * 1e-6,
             n_kernels=statistics.median(s["kernels"] for s in stats), split=split)
  names = [[r[2] for r in b] for b in blocks]
  if all(n == names[0] for n in names):           # the same kernels every call: each one's median duration
    out["kernels"] = [(name, statistics.median(b[i][1] for b in blocks) / 1e3) for i, name in enumerate(names[0])]
  return out


def device_span(fn, arg_sets, n_calls=12, gap_us=100.0, pause_s=1e-3, trace_dir=None, queued=False,
                kernels_per_call=None):
  """span_stats of n_calls calls of jax.jit(fn), call i on arg_sets[i % len(arg_sets)], under the profiler (warmed
  up first, outside the trace). Needs a GPU: the trace's /device:GPU:0 plane.

  queued False: each call waited for, then pause_s of host sleep (every call starts on an idle GPU).
  queued True: all n_calls enqueued, then one wait: the calls' kernels run back to back as in a program that runs
  many (the chain's steady state, without its add and reduction). Such calls are told apart by the trace's
  "XLA Modules" events, or by kernels_per_call (the blocking calls' kernel count: runs of that many kernels whose
  names repeat); a ValueError where neither cuts them."""
  import jax
  single = jax.jit(fn)
  for args in arg_sets:
    jax.block_until_ready(single(*args))

  def run():
    outs = []
    for i in range(n_calls):
      out = single(*arg_sets[i % len(arg_sets)])
      if queued:
        outs.append(out)
      else:
        jax.block_until_ready(out)
        time.sleep(pause_s)                        # the device idles: the calls separate in the trace
    jax.block_until_ready(outs)
  with tempfile.TemporaryDirectory() as tmp:
    path = xplane_timeline.record(run, trace_dir or os.path.join(tmp, "trace"))
    stats = span_stats(xplane_timeline.kernels(path), n_calls, gap_us, kernels_per_call=kernels_per_call)
  if queued and stats["split"] == "gaps":
    raise ValueError(f"device_span(queued=True): the trace has no \"XLA Modules\" event per call and no run of "
                     f"{kernels_per_call} kernels a call, so {n_calls} queued calls cannot be told apart")
  return stats
