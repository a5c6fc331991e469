"""Does a GPU kernel change DDTree acceptance? Per-prompt acceptance with the Pallas kernels vs the XLA references.

On the H200 (2026-12-03, benchmarks/RESULTS.md) the embedded model gave tau 5.01 at N=128 but 4.57 at N=256,
although a best-first tree of 256 nodes contains the 128-node tree; on the CPU (XLA references, fp32 and bf16)
N=256 >= N=128. This script runs the same prompts and budgets twice, each in a fresh process (the engine keeps
its compiled programs per process): once with the dispatch's choice ("auto": the Pallas kernels on a GPU) and once
with every custom call forced to its XLA reference. It writes per prompt the tokens, the accepted tokens per
round and tau for each (kernels, budget), and prints where the two disagree. The same acceptance under both
means the drop is bf16 trajectory drift; a difference at T=0 in fp32 means a kernel bug.

  PYTHONPATH=. python3 benchmarks/budget_kernels_check.py --out $OUT/budget_check.json      # GPU
  PYTHONPATH=. python3 benchmarks/budget_kernels_check.py --smoke                             # CPU dry run
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def force_xla_everywhere():
  """Every custom call to its XLA reference, for this process (before any program is compiled)."""
  import custom_calls.tree_build as tree_build
  import custom_calls.tree_verify as tree_verify
  from ddtree_jax.train import pipeline
  pipeline.force_xla_kernels()                     # MLA attention and the INT4 MoE
  tree_build.PALLAS_BY_DEFAULT = False
  tree_verify.PALLAS_BY_DEFAULT = False


def worker(kernels: str, budgets: list[int], dtype: str, num_prompts: int, max_new: int) -> dict:
  import jax.numpy as jnp
  from ddtree_jax.cli.bench import load_prompt_texts
  from ddtree_jax.engine import Engine
  from ddtree_jax.sampling import SamplingParams
  from ddtree_jax.train import pipeline
  if kernels == "xla":
    force_xla_everywhere()
  target, cfg, drafter, dcfg, tok = pipeline.load_pair(os.path.join(ROOT, "checkpoints", "default", "target"),
                                                       os.path.join(ROOT, "checkpoints", "default", "drafter"),
                                                       dtype=getattr(jnp, dtype))
  engine = Engine(target, cfg, drafter, dcfg)
  prompts = [tok.encode(t) for t in load_prompt_texts(None, tok, num_prompts)]
  out = {}
  for n in budgets:
    runs = [engine.generate([p], mode="ddtree", budget=n, sampling=SamplingParams(temperature=0.0),
                            max_new_tokens=max_new)[0] for p in prompts]
    out[str(n)] = [{"tokens": r.token_ids, "accepted": r.accepted_per_round} for r in runs]
  return out


def tau(runs) -> float:
  acc = [a for r in runs for a in r["accepted"]]
  return sum(acc) / max(len(acc), 1)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "budget_check.json"))
  ap.add_argument("--budgets", default="128,256")
  ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
  ap.add_argument("--num_prompts", type=int, default=16)
  ap.add_argument("--max_new_tokens", type=int, default=128)
  ap.add_argument("--smoke", action="store_true", help="2 prompts, budgets 4,8, 16 tokens (CPU check of the script)")
  ap.add_argument("--worker", choices=["auto", "xla"], help=argparse.SUPPRESS)
  args = ap.parse_args()
  if args.smoke:
    args.budgets, args.num_prompts, args.max_new_tokens = "4,8", 2, 16
  budgets = [int(b) for b in args.budgets.split(",")]
  if args.worker:
    print("RESULT " + json.dumps(worker(args.worker, budgets, args.dtype, args.num_prompts, args.max_new_tokens)))
    return
  results = {"budgets": budgets, "dtype": args.dtype, "max_new_tokens": args.max_new_tokens}
  for kernels in ("auto", "xla"):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", kernels, "--budgets", args.budgets, "--dtype",
           args.dtype, "--num_prompts", str(args.num_prompts), "--max_new_tokens", str(args.max_new_tokens)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=ROOT))
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
      sys.exit(f"budget_kernels_check: the {kernels} worker failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    results[kernels] = json.loads(lines[-1][len("RESULT "):])
  for n in map(str, budgets):
    a, x = results["auto"][n], results["xla"][n]
    same_acc = sum(p["accepted"] == q["accepted"] for p, q in zip(a, x))
    same_tok = sum(p["tokens"] == q["tokens"] for p, q in zip(a, x))
    print(f"N={n}: tau auto {tau(a):.2f}, xla {tau(x):.2f}; same tokens {same_tok}/{len(a)}, "
          f"same accepted-per-round {same_acc}/{len(a)}")
  os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
  with open(args.out, "w") as f:
    json.dump(results, f)
  print(f"wrote {args.out}")


if __name__ == "__main__":
  main()
