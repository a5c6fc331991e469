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
     Narrow them with -k regex:NAME and -c COUNT (issue 6 twelfth round, call 2: a 200-s limit ran out after 3).
  2. table (anywhere): the last run of each program, kernel by kernel.
       python3 benchmarks/ncu_programs.py table $OUT/ncu.csv --programs $OUT/ncu_programs.json

Programs: for each MLA shape B,T,H,ctx those of benchmarks/mla_decode_parts.py (the dispatch, the dispatch with
the XLA combine, the Triton kernel both ways); for each MoE token count the dispatch on k-chunked experts (what
the engine runs on a GPU) and on the stored layout, at K2.6's per-GPU expert shard; with --gemv_kwargs also
pallas_gemv's kernels with the given options (k-chunked experts) at each token count.
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


def programs(mla_shapes, moe_tokens, gemv_kwargs=()):
  """[(label, fn, args)] for the shapes asked for; gemv_kwargs: for each dict also pallas_gemv's kernels with
  those options at each MoE token count (k-chunked experts)."""
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
    e, d, inter = 48, 7168, 2048
    stored = kb.moe_inputs(0, 1, e, d, inter)[3:]
    chunked = jax.block_until_ready(experts_to_k_chunks(stored, KERNEL_K_CHUNK))
    fn = functools.partial(routed_experts_int4, expert_offset=0, impl="auto")
    for m in moe_tokens:
      tokens = kb.moe_inputs(m + 1, m, e, d, inter)[:3]
      out.append((f"moe {m} tokens k-chunked", fn, tokens + tuple(chunked)))
      out.append((f"moe {m} tokens stored", fn, tokens + tuple(stored)))
      for kw in gemv_kwargs:
        gemv = functools.partial(routed_experts_int4_gemv, expert_offset=0, **kw)
        out.append((f"moe {m} tokens gemv {json.dumps(kw, sort_keys=True)}", gemv, tokens + tuple(chunked)))
  return out


def drive(mla_shapes, moe_tokens, programs_json, gemv_kwargs=()):
  progs = programs(mla_shapes, moe_tokens, gemv_kwargs)
  labels = []
  for i, (label, fn, args) in enumerate(progs):
    f = jax.jit(fn)
    jax.block_until_ready(f(*args))                                 # compile (and autotune) outside the marks
    x = jnp.zeros((16,), jnp.float32) + i
    for r in range(RUNS):
      jax.block_until_ready(_marker(f"{MARK}{i}_{r}")(x))
      jax.block_until_ready(f(*args))
      jax.block_until_ready(_marker(f"{MARK}end")(x))
    labels.append(label)
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
  """{label: [(kernel, ns)]} of the last marked run of each program."""
  out = {}
  current = None
  for name, ns in kernels:
    if MARK in name:
      tag = name.split(MARK, 1)[1]
      if tag.startswith("end"):
        current = None
        continue
      i, r = tag.split("_")[:2]
      current = (int(i), int(r))
      if current[1] == RUNS - 1:
        out[labels[current[0]]] = []
      continue
    if current is not None and current[1] == RUNS - 1:
      out[labels[current[0]]].append((name, ns))
  return out


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
  d.add_argument("--gemv_kwargs", default="[]",
                 help='JSON list of pallas_gemv option dicts, e.g. \'[{"prefetch": 1}]\' (each at every --moe count)')
  d.add_argument("--programs", default=os.path.join(os.environ.get("OUT", "/tmp"), "ncu_programs.json"))
  t = sub.add_parser("table")
  t.add_argument("report")
  t.add_argument("--programs", required=True)
  a = ap.parse_args(argv)
  if a.cmd == "drive":
    shapes = [tuple(int(v) for v in s.split(",")) for s in a.mla.split(";") if s]
    tokens = [int(v) for v in a.moe.split(",") if v]
    drive(shapes, tokens, a.programs, json.loads(a.gemv_kwargs))
  else:
    table(a.report, a.programs)


if __name__ == "__main__":
  main()
