"""How a K2.6 slice forward spends its wall time on the GPU: kernels, idle time between them, host.

For each --slice ctx,T (benchmarks/k26_slice.py's one-GPU slice, built by ncu_programs.slice_programs: the
kernel path, random routing, donated caches carried from call to call):
  blocking    the median of --reps calls each ended by block_until_ready (what k26_slice.py reports);
  pipelined   --reps calls enqueued back to back, then one block: the time per call when the host runs ahead;
  trace       jax.profiler over --trace_calls blocking calls, read by xplane_timeline.py: per call the span from
              the first kernel's start to the last one's end, the time some kernel ran (busy) and the device's
              idle time inside the span (launch gaps), medians over the calls after the first.
Run it under different XLA_FLAGS (e.g. command buffers off or on for everything) to see what the gaps are.

  PYTHONPATH=. python3 benchmarks/slice_timeline.py --slice "4096,1;4096,9" --out $OUT/timeline.json
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import jax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import k26_slice  # noqa: E402
import ncu_programs  # noqa: E402
import xplane_timeline  # noqa: E402
from ddtree_jax.train.common import write_json  # noqa: E402


def time_program(call, reps):
  """(blocking median s, pipelined s per call): k26_slice.py's two timings."""
  blocking, _ = k26_slice._median_time(call, reps)
  return blocking, k26_slice._pipelined_time(call, reps)


def trace_program(call, calls, trace_dir, gap_us):
  """Per-call span / busy / idle (us, medians over calls 1..) from a jax.profiler trace of `calls` blocking calls.
  The trace is also copied to <trace_dir>.xplane.pb (xplane_timeline.py --plane /host:CPU reads the host's side)."""
  def blocking_calls():
    for _ in range(calls):
      jax.block_until_ready(call())
      time.sleep(0.002)                     # the device idles between calls, so the calls separate in the trace
  path = xplane_timeline.record(blocking_calls, trace_dir)
  blocks = xplane_timeline.calls(xplane_timeline.kernels(path), gap_us * 1e3)
  stats = [xplane_timeline.summary(b) for b in blocks]
  tail = stats[1:] or stats
  med = {k: statistics.median(s[k] for s in tail) for k in ("span_us", "busy_us", "idle_us", "kernels")}
  longest = sorted(blocks[-1], key=lambda r: -r[1])[:30]
  return dict(calls_seen=len(blocks), **med, longest_kernels_us=[(name, dur / 1e3) for _, dur, name, _ in longest])


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--slice", default="4096,1;4096,9", help="ctx,T;...")
  ap.add_argument("--moe_layers", type=int, default=1)
  ap.add_argument("--reps", type=int, default=30)
  ap.add_argument("--trace_calls", type=int, default=6,
                  help="0: no trace (a trace needs a GPU: it reads the device plane)")
  ap.add_argument("--gap_us", type=float, default=200.0, help="device idle time that separates two traced calls")
  ap.add_argument("--trace_dir", default=os.path.join(os.environ.get("OUT", "/tmp"), "slice_trace"))
  ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "slice_timeline.json"))
  ap.add_argument("--smoke", action="store_true", help="the slice's tiny dims (CPU)")
  a = ap.parse_args(argv)
  specs = [tuple(int(v) for v in s.split(",")) for s in a.slice.split(";") if s]
  rows = []
  for (ctx, t), (label, call) in zip(specs, ncu_programs.slice_programs(specs, a.moe_layers, smoke=a.smoke)):
    blocking, pipelined = time_program(call, a.reps)
    row = dict(label=label, context=ctx, T=t, moe_layers=a.moe_layers, blocking_ms=blocking * 1e3,
               pipelined_ms=pipelined * 1e3)
    if a.trace_calls:
      row.update(trace_program(call, a.trace_calls, os.path.join(a.trace_dir, f"{ctx}_{t}"), a.gap_us))
    rows.append(row)
    print(f"{label}: blocking {row['blocking_ms']:.3f} ms, pipelined {row['pipelined_ms']:.3f} ms"
          + (f"; trace: span {row['span_us']:.1f} us, busy {row['busy_us']:.1f}, idle {row['idle_us']:.1f}, "
             f"{row['kernels']:.0f} kernels" if a.trace_calls else ""), flush=True)
  write_json(a.out, dict(xla_flags=os.environ.get("XLA_FLAGS", ""), device=jax.devices()[0].device_kind,
                         date=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), rows=rows))
  return rows


if __name__ == "__main__":
  main()
