"""Every kernel of a dispatched program, timed on its own by Nsight Compute (`ncu`), next to the harness figure.

The chained harness of benchmarks/kernels.py times a whole program per call, launch gaps and its own add and
reduction included. This says which kernels a program launches and how long each runs on the device alone
(`gpu__time_duration.sum`, L2 flushed before every kernel by ncu's default cache control; clocks left alone).

  1. drive (GPU, under ncu): each program runs RUNS times, blocking; before every run a tiny Pallas kernel named
     `ncu_mark_<program index>_<run>` is launched and after it one named `ncu_mark_end`, so the kernels of each
     run can be told apart in the report (from the compilation's and the inputs' kernels too).
       ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw --print-units base \
           --log-file $OUT/ncu.csv python3 benchmarks/ncu_programs.py drive --mla "1,1,64,32768" --moe 1,8
     Sections beyond that one metric (--section ...) make ncu replay each kernel ~18 times, saving and restoring
     the device memory in use (the MoE programs hold ~2.5 GB of experts) around every pass: tens of seconds a
     kernel.
     Narrow them with -k regex:NAME and -c COUNT (issue 6 twelfth round, call 2: a 200-s limit ran out after 3),
     and shrink the MoE inputs with --moe_experts (8 experts: ~0.4 GB).
  2. table (anywhere): the last run of each program, kernel by kernel.
       python3 benchmarks/ncu_programs.py table $OUT/ncu.csv --programs $OUT/ncu_programs.json

Programs: for each MLA shape B,T,H,ctx those of benchmarks/mla_decode_parts.py (the dispatch, the dispatch with
the XLA combine, the Triton kernel both ways); for each MoE token count the dispatch on k-chunked experts (what
the engine runs on a GPU) and (unless --no_moe_stored) on the stored layout, at K2.6's per-GPU expert shard (or
--moe_experts experts); with --gemv_kwargs also
pallas_gemv's kernels with the given options (k-chunked experts) at each token count; for each --slice ctx,T a
forward of the K2.6 one-GPU slice (benchmarks/k26_slice.py: every kernel of a layer, attention projections to
lm_head).
"""
from __future__ import annotations

import argparse
import csv
import gzip
import functools
import json
import os
import sys

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

RUNS = 3
MARK = "ncu_mark_"


def _marker(name):
  """A one-program Pallas Triton kernel whose name ncu reports (the program boundary in the report)."""
  from jax.experimental import pallas as pl

  def body(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0
  return jax.jit(pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((16,), jnp.float32), name=name))


def programs(mla_shapes, moe_tokens, gemv_kwargs=(), moe_experts=48, moe_stored=True):
  """[(label, fn, args)] for the shapes asked for; gemv_kwargs: for each dict also pallas_gemv's kernels with
  those options at each MoE token count (k-chunked experts). moe_experts: local experts in the MoE inputs (K2.6's
  shard: 48; fewer keep ncu's save and restore of device memory around each replayed pass short); moe_stored: also
  the dispatch on the stored layout."""
  import kernels as kb
  import mla_decode_parts
  from custom_calls.moe_int4 import KERNEL_K_CHUNK, experts_to_k_chunks, routed_experts_int4
  from custom_calls.moe_int4.pallas_gemv import routed_experts_int4_gemv
  out = []
  for (b, t, h, s) in mla_shapes:
    args = kb.mla_inputs(b * 1000 + t * 10 + h + s, b, t, h, s)
    for name, fn in mla_decode_parts.programs(t * h, interp=False):
      out.append((f"mla {b}x{t}x{h}x{s} {name}", fn, args))
  if moe_tokens:
    e, d, inter = moe_experts, 7168, 2048
    stored = kb.moe_inputs(0, 1, e, d, inter)[3:]
    chunked = jax.block_until_ready(experts_to_k_chunks(stored, KERNEL_K_CHUNK))
    fn = functools.partial(routed_experts_int4, expert_offset=0, impl="auto")
    for m in moe_tokens:
      tokens = kb.moe_inputs(m + 1, m, e, d, inter)[:3]
      out.append((f"moe {m} tokens k-chunked", fn, tokens + tuple(chunked)))
      if moe_stored:
        out.append((f"moe {m} tokens stored", fn, tokens + tuple(stored)))
      for kw in gemv_kwargs:
        gemv = functools.partial(routed_experts_int4_gemv, expert_offset=0, **kw)
        out.append((f"moe {m} tokens gemv {json.dumps(kw, sort_keys=True)}", gemv, tokens + tuple(chunked)))
  return out


def slice_programs(specs, moe_layers, hlo_dir=None, smoke=False):
  """[(label, call)] for each (ctx, T) of specs: one forward of benchmarks/k26_slice.py's K2.6 one-GPU slice
  (1 dense + moe_layers MoE layers + the lm_head shard) on the kernel path, random routing, the caches donated
  and carried from call to call as the engine does. With hlo_dir, each program's optimized HLO is written there
  (hlo_slice_<ctx>_<T>.txt: the fusion names are the kernel names ncu reports). smoke: the slice's tiny dims
  (the CPU test)."""
  import numpy as np
  import k26_slice as ks
  d = ks.SMOKE if smoke else ks.H200
  params, _ = ks.kernel_layout_params(ks.init_params(jax.random.key(0), d, moe_layers), d)
  inv_freq, mult = ks.rope_tables(d)
  out = []
  for ctx, t in specs:
    rng = np.random.default_rng(ctx + t)
    state = {"caches": ks.make_caches(d, ctx, t, 1 + moe_layers)}
    x, positions, cache_len, mask = ks.step_inputs(d, rng, ctx, t)
    ids_np = np.stack([ks.routing(rng, t, d, "random") for _ in range(moe_layers)])
    ids = jnp.asarray(ids_np)
    fn = ks.forward_program(d, "pallas", inv_freq, mult)
    if hlo_dir:
      text = fn.lower(params, state["caches"], x, positions, cache_len, mask, ids).compile().as_text()
      with open(os.path.join(hlo_dir, f"hlo_slice_{ctx}_{t}.txt"), "w") as fh:
        fh.write(text)

    def call(fn=fn, state=state, args=(x, positions, cache_len, mask, ids)):
      tokens, state["caches"] = fn(params, state["caches"], *args)
      return tokens
    local = [len(set(row[row < d.experts].tolist())) for row in ids_np.reshape(moe_layers, -1)]
    out.append((f"slice ctx {ctx} T {t} ({1 + moe_layers} layers, local experts {local})", call))
  return out


def drive(mla_shapes, moe_tokens, programs_json, gemv_kwargs=(), slices=(), slice_moe_layers=1, hlo_dir=None,
          time_reps=0, moe_experts=48, moe_stored=True, runs=RUNS):
  """Run every program `runs` times between markers. time_reps > 0 (a run outside ncu): also print the median of
  that many blocking calls of each program, ms."""
  progs = [(label, functools.partial(jax.jit(fn), *args))
           for label, fn, args in programs(mla_shapes, moe_tokens, gemv_kwargs, moe_experts, moe_stored)]
  progs += slice_programs(slices, slice_moe_layers, hlo_dir) if slices else []
  labels = []
  for i, (label, call) in enumerate(progs):
    jax.block_until_ready(call())                                   # compile (and autotune) outside the marks
    x = jnp.zeros((16,), jnp.float32) + i
    for r in range(runs):
      jax.block_until_ready(_marker(f"{MARK}{i}_{r}")(x))
      jax.block_until_ready(call())
      jax.block_until_ready(_marker(f"{MARK}end")(x))
    labels.append(label)
    if time_reps:
      import k26_slice
      median, _ = k26_slice._median_time(call, time_reps)
      print(f"ncu_programs: {label}: median of {time_reps} blocking calls {median * 1e3:.3f} ms", flush=True)
    print(f"ncu_programs: {label} done", flush=True)
  with open(programs_json, "w") as fh:
    json.dump(labels, fh, indent=1)


def read_report(path):
  """ncu's raw CSV page (plain or .gz) -> [(kernel name, duration ns)] in launch order (ncu's own log lines
  skipped)."""
  with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as fh:
    lines = [ln for ln in fh if ln.startswith('"')]
  rows = list(csv.DictReader(lines))
  out = []
  for row in rows:
    dur = row.get("gpu__time_duration.sum", "")
    try:
      out.append((row["Kernel Name"], float(dur.replace(",", ""))))   # ncu groups thousands
    except ValueError:                                              # the units row
      continue
  return out


def last_runs(kernels, labels):
  """{label: [(kernel, ns)]} of the last marked run of each program (the run with the highest index, whatever
  `drive --runs` was)."""
  runs = {}                                       # (program, run) -> [(kernel, ns)]
  current = None
  for name, ns in kernels:
    if MARK in name:
      tag = name.split(MARK, 1)[1]
      if tag.startswith("end"):
        current = None
        continue
      i, r = tag.split("_")[:2]
      current = (int(i), int(r))
      runs[current] = []
      continue
    if current is not None:
      runs[current].append((name, ns))
  last = {}
  for (i, r) in runs:
    last[i] = max(last.get(i, r), r)
  return {labels[i]: runs[(i, r)] for i, r in last.items()}


def table(report, programs_json):
  labels = json.load(open(programs_json))
  runs = last_runs(read_report(report), labels)
  lines = ["| program | kernels | device us (sum) | kernels, us |", "|---|---|---|---|"]
  for label in labels:
    ks = runs.get(label, [])
    parts = ", ".join(f"{name[:40]} {ns / 1e3:.1f}" for name, ns in ks)
    lines.append(f"| {label} | {len(ks)} | {sum(ns for _, ns in ks) / 1e3:.1f} | {parts} |")
  text = "\n".join(lines)
  print(text)
  return runs


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  sub = ap.add_subparsers(dest="cmd", required=True)
  d = sub.add_parser("drive")
  d.add_argument("--mla", default="", help="B,T,H,ctx;...")
  d.add_argument("--moe", default="", help="token counts, e.g. 1,2,4,8")
  d.add_argument("--moe_experts", type=int, default=48,
                 help="local experts of the MoE inputs (48: K2.6's shard; fewer for ncu sections, see drive)")
  d.add_argument("--no_moe_stored", action="store_true", help="leave out the MoE dispatch on the stored layout")
  d.add_argument("--runs", type=int, default=RUNS,
                 help="runs of each program (1 keeps ncu sections short; `table` reads the last run of each)")
  d.add_argument("--gemv_kwargs", default="[]",
                 help='JSON list of pallas_gemv option dicts, e.g. \'[{"prefetch": 1}]\' (each at every --moe count)')
  d.add_argument("--slice", default="", help="ctx,T;... : forwards of the K2.6 one-GPU slice (k26_slice.py)")
  d.add_argument("--slice_moe_layers", type=int, default=1, help="MoE layers of the slice (after its dense layer)")
  d.add_argument("--hlo_dir", default=None, help="write the slice programs' optimized HLO here")
  d.add_argument("--time_reps", type=int, default=0, help="also time each program (outside ncu), median of N")
  d.add_argument("--programs", default=os.path.join(os.environ.get("OUT", "/tmp"), "ncu_programs.json"))
  t = sub.add_parser("table")
  t.add_argument("report")
  t.add_argument("--programs", required=True)
  a = ap.parse_args(argv)
  if a.cmd == "drive":
    shapes = [tuple(int(v) for v in s.split(",")) for s in a.mla.split(";") if s]
    tokens = [int(v) for v in a.moe.split(",") if v]
    slices = [tuple(int(v) for v in s.split(",")) for s in a.slice.split(";") if s]
    drive(shapes, tokens, a.programs, json.loads(a.gemv_kwargs), slices, a.slice_moe_layers, a.hlo_dir, a.time_reps,
          a.moe_experts, not a.no_moe_stored, a.runs)
  else:
    table(a.report, a.programs)


if __name__ == "__main__":
  main()
