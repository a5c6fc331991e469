"""Static count of the per-thread work in one pipeline step of the Mosaic GPU expert kernels, without a GPU.

Mosaic GPU builds a kernel's code (layouts, loads, conversions, wgmma) in Python while JAX lowers it, so the lowered
module already holds every operation of a pipeline step, unrolled. This lowers custom_calls/moe_int4/mosaic_experts.py
for an abstract H200 at the K2.6 shard and counts, per kernel, the operations of the step that matter for the issue
rate: ldmatrix (4-bit tile loads), shuffles and byte permutes (the relayout to the wgmma layout), int4 -> bf16
conversions (each is PRMT + LOP3 + a bf16x2 subtract for 2 weights), bf16x2 multiplies (the scales), scalar shared
loads (the scales), wgmma; and the shared memory of a program (the launch's dynamic size). Divided by the weights
a thread handles per step (64 x block_k / 128) it gives the operations per weight that RESULTS sets beside the
Triton gemv's SASS (~6 instructions per weight). It is a count of the lowered module, not of SASS: ptxas adds
address arithmetic and may merge or split some, so it is a lower bound.

  .venv/bin/python benchmarks/mosaic_ops_report.py --tokens 1
  .venv/bin/python benchmarks/mosaic_ops_report.py --tokens 8 \
      --kwargs '{"wgmma_order": true, "block_k": 512, "k_splits": 7}'

The modules are seen before serialisation through custom_calls/gpu_lowering.py (a private jax API, jax 0.11.2).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys

PATTERNS = {
    "ldmatrix": r"nvvm\.ldmatrix",
    "shuffle": r"nvvm\.shfl\.sync bfly",
    "byte_permute": r"\"prmt\.b32 \$0, \$1, \$2, \$3;",
    "int4_to_bf16x2": r"\.reg \.b32 s<4>;",
    "scale_mul_bf16x2": r"arith\.mulf [^:]*: vector<2xbf16>",
    "scale_load": r"llvm\.load [^:]*: !llvm\.ptr<3> -> vector<1xbf16>",
    "wgmma": r"wgmma\.mma_async",
}


def lowered_kernels(tokens, **opts):
  """The Mosaic modules (text) of routed_experts_int4_mosaic lowered for an H200 at the K2.6 shard: [gate/up, down]."""
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  from custom_calls.moe_int4.mosaic_experts import lower_for_h200

  modules = []
  lower_for_h200(tokens, on_mosaic_module=lambda module: modules.append(str(module)), **opts)
  return modules


def step_counts(module_text):
  """{operation: count} of PATTERNS in one kernel's module, and its shared memory in bytes (None if not found)."""
  smem = re.search(r"dynamic_shared_memory_size %c(\d+)_i32", module_text)
  return {k: len(re.findall(p, module_text)) for k, p in PATTERNS.items()}, int(smem.group(1)) if smem else None


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--tokens", type=int, default=1)
  ap.add_argument("--kwargs", default="{}", help="routed_experts_int4_mosaic options, JSON")
  a = ap.parse_args()
  opts = json.loads(a.kwargs)
  modules = lowered_kernels(a.tokens, **opts)
  from custom_calls.moe_int4.mosaic_experts import default_options
  block_k = opts.get("block_k") or default_options(7168, 2048)[0]
  weights_per_thread = 64 * block_k // 128
  print(f"tokens {a.tokens}, options {opts}: per pipeline step of {block_k} columns, {weights_per_thread} weights "
        "a thread")
  for name, text in zip(("gate/up", "down"), modules):
    counts, smem = step_counts(text)
    # instructions: a conversion is 3 (PRMT, LOP3, subtract), a relayout step 1 each; the rest 1 per operation
    instructions = sum(counts.values()) + 2 * counts["int4_to_bf16x2"]
    print(f"  {name}: " + ", ".join(f"{k} {v}" for k, v in counts.items()) +
          f" -> ~{instructions} instructions, {instructions / weights_per_thread:.2f} a weight "
          f"(before address arithmetic); shared memory {smem / 1024 if smem else float('nan'):.1f} KB a program")


if __name__ == "__main__":
  main()
