"""Kimi K2.6 on 8 GPUs (61 layers): projected time per output token for AR, DFlash chain and DDTree.

time per token = round_s(mode, N, ctx) / tau(N), round_s from `ddtree_jax/cost_model.py` (fitted to the
one-GPU slice measured by benchmarks/k26_slice.py on an H200; `--refit` refits configs/cost_h200.json
from the slice JSON first). tau(N) curves:
  embedded : measured on the embedded default model (benchmarks/results/default_model/bench.json, block 16);
  paper    : DDTree paper, Qwen3-8B MATH-500 T=0, block 16 (REFERENCE.md section 3), interpolated in log2 N;
  kimi     : the paper curve rescaled to the Kimi K2.5 DFlash drafter (block 8, tau 5.3 on GSM8K):
             tau(N) = min(8, 5.3 * paper(N) / 7.79) -- an assumption, not a measurement.
Baseline: SGLang, Kimi K2.5, 8 x H200, TP8, batch 1: 9.22 ms per output token (REFERENCE.md section 4).

Usage: PYTHONPATH=. python benchmarks/k26_projection.py [--refit] [--impl pallas]
"""
from __future__ import annotations

import argparse
import json
import math
import os

from ddtree_jax import cost_model as cm

SGLANG_MS = 9.22
BUDGETS = (8, 16, 32, 64, 128, 256)
CONTEXTS = (4096, 32768)
PAPER_DDTREE = {16: 8.6, 64: 9.75, 256: 10.4, 512: 10.73, 1024: 11.0}
PAPER_DFLASH = 7.79
KIMI_DFLASH, KIMI_BLOCK = 5.3, 8


def paper_tau(n: int) -> float:
  xs = sorted(PAPER_DDTREE)
  lx = math.log2(n)
  lo, hi = (xs[0], xs[1]) if n < xs[0] else next(((a, b) for a, b in zip(xs, xs[1:]) if a <= n <= b), (xs[-2], xs[-1]))
  t = (lx - math.log2(lo)) / (math.log2(hi) - math.log2(lo))
  return PAPER_DDTREE[lo] + t * (PAPER_DDTREE[hi] - PAPER_DDTREE[lo])


def embedded_taus(path: str):
  """{('ar'|'dflash'|'ddtree', N): tau} from ddtree-bench's JSON, or None when absent."""
  if not os.path.exists(path):
    return None
  with open(path) as fh:
    doc = json.load(fh)
  out = {}
  for r in doc["records"]:
    if r.get("temperature", 0.0) != 0.0:
      continue
    out[(r["mode"], r.get("budget") or 0)] = r["tau"]
  return out


def curves(bench_path):
  emb = embedded_taus(bench_path)
  c = {"paper": {("dflash", 0): PAPER_DFLASH, **{("ddtree", n): paper_tau(n) for n in BUDGETS}},
       "kimi": {("dflash", 0): KIMI_DFLASH,
                **{("ddtree", n): min(KIMI_BLOCK, KIMI_DFLASH * paper_tau(n) / PAPER_DFLASH) for n in BUDGETS}}}
  if emb:
    c["embedded"] = {k: v for k, v in emb.items() if k[0] != "ar"}
  return c, emb is not None


def main(argv=None):
  ap = argparse.ArgumentParser()
  ap.add_argument("--refit", action="store_true", help="refit configs/cost_h200.json from --slice_json")
  ap.add_argument("--slice_json", default="benchmarks/results/k26_slice_h200_r19.json")
  ap.add_argument("--bench_json", default="benchmarks/results/default_model/bench.json")
  ap.add_argument("--cost", default=cm.DEFAULT_PATH)
  ap.add_argument("--impl", default="pallas")
  ap.add_argument("--out", default="benchmarks/results/k26_projection.json")
  args = ap.parse_args(argv)
  if args.refit:
    cm.fit_from_bench(args.slice_json, args.cost)
  taus, have_emb = curves(args.bench_json)
  rows = []
  for ic in ("nvlink", "pcie"):
    model = cm.load(args.cost, impl=args.impl, interconnect=ic)
    for ctx in CONTEXTS:
      ar = model.round_s("ar", 0, ctx)
      rows.append(dict(interconnect=ic, context=ctx, curve="-", mode="ar", budget=None, tau=1.0, round_ms=ar * 1e3,
                       ms_per_token=ar * 1e3, **_split(model, "ar", 0, ctx)))
      for name, tau in taus.items():
        entries = [("dflash", 0)] + [("ddtree", n) for n in BUDGETS]
        for mode, n in entries:
          if (mode, n) not in tau:
            continue
          r = model.round_s(mode, n, ctx)
          rows.append(dict(interconnect=ic, context=ctx, curve=name, mode=mode, budget=n or None, tau=tau[(mode, n)],
                           round_ms=r * 1e3, ms_per_token=r * 1e3 / tau[(mode, n)], **_split(model, mode, n, ctx)))
  doc = dict(assumptions=dict(
      cost_model=cm.__doc__, fit=cm.load(args.cost, impl=args.impl).source, impl=args.impl,
      interconnects={k: v.name for k, v in cm.INTERCONNECTS.items()},
      tau_curves=__doc__.split("tau(N) curves:")[1].split("Baseline:")[0].strip(),
      embedded_measured=have_emb, sglang_ms_per_token=SGLANG_MS,
      not_included="host work between rounds, prefill, tree build/walk/compaction kernels (about 0.1-0.5 ms per "
                   "round on the H200, RESULTS.md), the drafter's context attention"), rows=rows)
  os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
  with open(args.out, "w") as fh:
    json.dump(doc, fh, indent=1)
  print_table(rows, have_emb)
  print(f"wrote {args.out}")


def _split(model, mode, n, ctx):
  b = model.breakdown(mode, n, ctx)
  return {f"{k}_ms": v * 1e3 for k, v in b.items() if k not in ("T", "distinct_local_experts")} | dict(
      T=b["T"], distinct_local_experts=b["distinct_local_experts"])


def print_table(rows, have_emb):
  print("\nK2.6, 61 layers on 8 GPUs, batch 1 (projection from the one-H200 slice; SGLang K2.5 8xH200: "
        f"{SGLANG_MS} ms/token)" + ("" if have_emb else "  [embedded tau: PLACEHOLDER, bench JSON missing]"))
  print("| link | ctx | tau curve | mode | N | T | experts/GPU/layer | round ms (fixed+attn+experts+comm+draft) | tau | ms/token | vs SGLang |")
  print("|---|---|---|---|---|---|---|---|---|---|---|")
  for r in rows:
    parts = "+".join(f"{r[k]:.1f}" for k in ("fixed_ms", "attention_ms", "experts_ms", "comm_ms", "drafter_ms"))
    print(f"| {r['interconnect']} | {r['context'] // 1024}K | {r['curve']} | {r['mode']} | {r['budget'] or '-'} | {r['T']} | "
          f"{r['distinct_local_experts']:.1f} | {r['round_ms']:.1f} ({parts}) | {r['tau']:.2f} | {r['ms_per_token']:.2f} | "
          f"{SGLANG_MS / r['ms_per_token']:.2f}x |")
  best = {}
  for r in rows:
    k = (r["interconnect"], r["context"], r["curve"])
    if r["mode"] == "ddtree" and (k not in best or r["ms_per_token"] < best[k]["ms_per_token"]):
      best[k] = r
  print("\nbest DDTree budget per (link, context, tau curve):")
  for (ic, ctx, curve), r in sorted(best.items()):
    print(f"  {ic:6s} {ctx // 1024:3d}K {curve:8s}: N={r['budget']:4d}  {r['ms_per_token']:.2f} ms/token")


if __name__ == "__main__":
  main()
