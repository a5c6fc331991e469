"""Static SASS report of a Pallas Triton kernel for an H200, without a GPU: registers, spills, inner-loop mix.

Two steps, two Python environments (jax's CPU wheel has no Triton compiler; Triton's wheel has ptxas,
nvdisasm and cuobjdump for sm_90):

  1. lower (project venv): every Pallas Triton kernel of one call is lowered for an abstract NVIDIA H200 and
     its Triton IR written to DIR:
       .venv/bin/python benchmarks/sass_report.py lower --kernel mla --shape 1,257,8,32768 --out /tmp/sass
       .venv/bin/python benchmarks/sass_report.py lower --kernel moe_gemv --tokens 1 --out /tmp/sass
       .venv/bin/python benchmarks/sass_report.py lower --kernel moe_gemv --tokens 1 --k_chunk 256 --out /tmp/sass_kc
       .venv/bin/python benchmarks/sass_report.py lower --kernel mla_combine --shape 1,128,64,bfloat16 --out /tmp/c
  2. compile (any Python with `pip install triton==3.6.0`, the GPU machine's Triton; no GPU needed):
       python benchmarks/sass_report.py compile --dir /tmp/sass --num_warps 8 --num_stages 2

`compile` prints per module: registers, stack bytes (spills), shared memory, the whole kernel's barriers and
shared-memory instructions (BAR, STS, LDS, STSM, LDSM: where Triton converts layouts), and the instruction histogram
of every loop (a backward branch) with the same counts, which is what decided the changes recorded in
benchmarks/RESULTS.md ("Issue 6, fourth round"). num_warps / num_stages must be the ones the kernel is launched with.
"""
from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import subprocess
import sys


def lower(args):
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  import jax
  import jax.numpy as jnp
  from custom_calls.gpu_lowering import lower_for_abstract_gpu

  os.makedirs(args.out, exist_ok=True)
  written = []

  def dump(module):
    path = os.path.join(args.out, f"{args.kernel}_{len(written) + 1}.ttir")
    with open(path, "w") as f:
      f.write(module.operation.get_asm(enable_debug_info=False))
    written.append(path)

  S = jax.ShapeDtypeStruct
  kw = dict(eval(f"dict({args.kwargs})")) if args.kwargs else {}
  if args.kernel == "mla_combine":
    from custom_calls.mla_attention.split_combine import combine_splits_pallas
    b, ns, m, dt = args.shape.split(",")      # B, splits, rows, partial dtype
    shapes = (S((int(b), int(ns), int(m), 512), jnp.dtype(dt)), S((int(b), int(ns), int(m)), jnp.float32))
    fn = lambda *a: combine_splits_pallas(*a, out_dtype=jnp.bfloat16, **kw)
  elif args.kernel == "mla":
    from custom_calls.mla_attention.pallas_triton import mla_attention_pallas
    b, t, h, s = map(int, args.shape.split(","))
    shapes = (S((b, t, h, 512), jnp.bfloat16), S((b, t, h, 64), jnp.bfloat16), S((b, s, 512), jnp.bfloat16),
              S((b, s, 64), jnp.bfloat16), S((b,), jnp.int32), S((b, t, t), jnp.bool_))
    kw.setdefault("combine", "xla")   # the attention kernel's module only (not the split combine's, 4 warps)
    fn = lambda *a: mla_attention_pallas(*a, scale=0.1, **kw)
  else:
    from custom_calls.moe_int4.k_chunks import to_k_chunks
    from custom_calls.moe_int4.pallas_gemv import routed_experts_int4_gemv
    from custom_calls.moe_int4.pallas_gemv_pipelined import routed_experts_int4_gemv_pipelined
    from custom_calls.moe_int4.pallas_triton import routed_experts_int4_pallas
    from custom_calls.moe_int4.pallas_triton_pipelined import routed_experts_int4_grouped_one_launch
    e, d, inter, n = 48, 7168, 2048, args.tokens       # the K2.6 per-GPU expert shard
    experts = []
    for rows, cols in ((inter, d), (inter, d), (d, inter)):
      words, scales = S((e, rows, cols // 8), jnp.int32), S((e, rows, cols // 32), jnp.bfloat16)
      if args.k_chunk:                                 # the layout the engine gives the kernels on a GPU
        words, scales = jax.eval_shape(lambda w, s: to_k_chunks(w, s, args.k_chunk), words, scales)
      experts += [words, scales]
    shapes = (S((n, d), jnp.bfloat16), S((n, 8), jnp.int32), S((n, 8), jnp.float32), *experts)
    kernel = {"moe_gemv": routed_experts_int4_gemv, "moe_gemv_pipelined": routed_experts_int4_gemv_pipelined,
              "moe_grouped": routed_experts_int4_pallas,
              "moe_grouped_one_launch": routed_experts_int4_grouped_one_launch}[args.kernel]
    fn = lambda *a: kernel(*a, 0, **kw)
  lower_for_abstract_gpu(fn, *shapes, on_module=dump)
  print("\n".join(written))


SYNC_OPCODES = ("BAR", "STS", "LDS", "STSM", "LDSM")    # barriers and shared memory (layout conversions go through them)


def opcode_counts(lines):
  """Counter of the SASS opcodes in these nvdisasm lines (predicates skipped)."""
  ops = collections.Counter()
  for x in lines:
    mm = re.match(r"^\s*/\*[0-9a-f]+\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_]+)", x)
    if mm:
      ops[mm.group(2)] += 1
  return ops


def sync_counts(ops):
  """'BAR n STS n LDS n STSM n LDSM n': the opcodes the most_common(16) histogram can leave out."""
  return " ".join(f"{op} {ops.get(op, 0)}" for op in SYNC_OPCODES)


def loop_histograms(sass: str):
  """{(label, first line, last line): Counter of opcodes} for every loop (a branch back to an earlier label)."""
  lines = sass.splitlines()
  labels = {m.group(1): i for i, l in enumerate(lines) if (m := re.match(r"^(\.L_x_\d+):", l))}
  loops = {}
  for i, line in enumerate(lines):
    m = re.search(r"BRA `?\(?(\.L_x_\d+)", line)
    if m and m.group(1) in labels and labels[m.group(1)] < i:
      start = labels[m.group(1)]
      ops = opcode_counts(lines[start:i + 1])
      if sum(ops.values()) > 1:
        loops[(m.group(1), start, i)] = ops
  return loops


def compile_dir(args):
  import triton
  from triton.backends.compiler import GPUTarget
  tools = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
  for path in sorted(glob.glob(os.path.join(args.dir, "*.ttir"))):
    k = triton.compile(path, target=GPUTarget("cuda", 90, 32),
                       options=dict(num_warps=args.num_warps, num_stages=args.num_stages))
    cubin = path[:-5] + ".cubin"
    with open(cubin, "wb") as f:
      f.write(k.asm["cubin"])
    usage = subprocess.run([os.path.join(tools, "cuobjdump"), "-res-usage", cubin], capture_output=True, text=True).stdout
    res = " ".join(re.findall(r"(?:REG|STACK|SHARED|LOCAL):\d+", usage))
    sass = subprocess.run([os.path.join(tools, "nvdisasm"), "-c", cubin], capture_output=True, text=True).stdout
    with open(path[:-5] + ".sass", "w") as f:
      f.write(sass)
    whole = opcode_counts(sass.splitlines())
    print(f"{os.path.basename(path)}: {res} (dynamic shared {k.metadata.shared} B); whole kernel {sum(whole.values())} "
          f"instructions, {sync_counts(whole)}")
    for (label, a, b), ops in loop_histograms(sass).items():
      print(f"  loop {label} ({b - a} lines): {sum(ops.values())} instructions ({sync_counts(ops)}): "
            f"{dict(ops.most_common(16))}")


def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  sub = ap.add_subparsers(dest="cmd", required=True)
  lo = sub.add_parser("lower")
  lo.add_argument("--kernel", choices=["mla", "mla_combine", "moe_gemv", "moe_gemv_pipelined", "moe_grouped",
                                           "moe_grouped_one_launch"], required=True)
  lo.add_argument("--shape", default="1,257,8,32768", help="mla: B,T,H,S; mla_combine: B,splits,rows,dtype")
  lo.add_argument("--tokens", type=int, default=1, help="moe: tokens (one local expert each at most)")
  lo.add_argument("--k_chunk", type=int, default=0, help="moe: k-chunk the expert arrays (k_chunks.py) by this")
  lo.add_argument("--kwargs", default="", help="extra kernel keyword arguments, e.g. 'block_n=8, sort_pairs=True'")
  lo.add_argument("--out", required=True)
  co = sub.add_parser("compile")
  co.add_argument("--dir", required=True)
  co.add_argument("--num_warps", type=int, default=4)
  co.add_argument("--num_stages", type=int, default=2)
  args = ap.parse_args()
  lower(args) if args.cmd == "lower" else compile_dir(args)


if __name__ == "__main__":
  main()
