"""--budget=auto against every fixed budget, side by side in one run, on the embedded default model.

Protocol: each configuration (fixed budgets 8..128 and auto) is warmed up once on the first prompt
(compiles; for auto this run is also where the round costs get measured -- the engine keeps them, so
the timed runs use them). Then `--reps` repetitions, each running every configuration over all prompts
in a shuffled order (so that machine drift hits all alike); tokens/s = generated tokens / wall time per
repetition. Noise = the spread of a configuration over repetitions. Every configuration must produce
the same tokens (T=0, lossless), which the script checks.

Usage: PYTHONPATH=. python benchmarks/auto_budget.py [--reps 3 --num_prompts 8 --max_new_tokens 64]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import time

import jax

BUDGETS = (8, 16, 32, 64, 128)


def main(argv=None):
  ap = argparse.ArgumentParser()
  ap.add_argument("--reps", type=int, default=3)
  ap.add_argument("--num_prompts", type=int, default=8)
  ap.add_argument("--max_new_tokens", type=int, default=64)
  ap.add_argument("--dtype", default="float32", help="float32: every budget gives AR's tokens exactly "
                  "(in bfloat16 near-tied argmaxes can flip, README)")
  ap.add_argument("--out", default="benchmarks/results/auto_budget.json")
  args = ap.parse_args(argv)
  from ddtree_jax.cli.bench import DEFAULT_PROMPTS
  from ddtree_jax.cli.common import load_models, parse_dtype
  from ddtree_jax.engine import Engine

  target, cfg, drafter, dcfg, tok, label = load_models(None, None, parse_dtype(args.dtype), want_drafter=True)
  if drafter is None:
    raise SystemExit("no drafter: the embedded default model (checkpoints/default) is needed")
  with open(DEFAULT_PROMPTS) as fh:
    texts = [json.loads(l)["prompt"] for l in fh if l.strip()][: args.num_prompts]
  prompts = [tok.encode(t) for t in texts]
  engine = Engine(target, cfg, drafter, dcfg)
  configs = [str(b) for b in BUDGETS] + ["auto"]
  budget_of = lambda c: "auto" if c == "auto" else int(c)
  print(f"model {label}, {len(prompts)} prompts, max_new {args.max_new_tokens}, device {jax.devices()[0].device_kind}",
        flush=True)
  t0 = time.perf_counter()
  for c in configs:   # auto: over every prompt, so that its round costs are measured (kept by the engine)
    for p in (prompts if c == "auto" else prompts[:1]):
      engine.generate([p], mode="ddtree", budget=budget_of(c), max_new_tokens=args.max_new_tokens)
  print(f"warm-up (compiles + auto calibration) {time.perf_counter() - t0:.1f} s; auto costs (s/round): "
        + ", ".join(f"{n}: {s * 1e3:.1f} ms" for n, s in engine.last_auto["cost_s"].items()), flush=True)
  tps = {c: [] for c in configs}
  taus = {c: [] for c in configs}
  tokens_of = {}
  auto_hist = {}
  rng = random.Random(0)
  mismatches = 0
  for rep in range(args.reps):
    order = configs[:]
    rng.shuffle(order)
    for c in order:
      n_tok, wall, emitted, rounds = 0, 0.0, 0, 0
      for i, p in enumerate(prompts):
        t1 = time.perf_counter()
        r = engine.generate([p], mode="ddtree", budget=budget_of(c), max_new_tokens=args.max_new_tokens)[0]
        wall += time.perf_counter() - t1
        n_tok += len(r.token_ids)
        emitted += sum(r.accepted_per_round)
        rounds += r.rounds
        prev = tokens_of.setdefault(i, r.token_ids)
        mismatches += prev != r.token_ids
        if c == "auto":
          for n, k in engine.last_auto["rounds_per_budget"].items():
            auto_hist[n] = auto_hist.get(n, 0) + k
      tps[c].append(n_tok / wall)
      taus[c].append(emitted / rounds)
    print(f"rep {rep}: " + "  ".join(f"{c}: {tps[c][-1]:.1f}" for c in configs), flush=True)

  summary = {c: dict(tokens_per_s_mean=statistics.mean(v), tokens_per_s_min=min(v), tokens_per_s_max=max(v),
                     tokens_per_s_std=statistics.pstdev(v), tau=statistics.mean(taus[c]), reps=v)
             for c, v in tps.items()}
  fixed = [c for c in configs if c != "auto"]
  best = max(fixed, key=lambda c: summary[c]["tokens_per_s_mean"])
  noise = max(summary[c]["tokens_per_s_max"] - summary[c]["tokens_per_s_min"] for c in configs)
  ratio = summary["auto"]["tokens_per_s_mean"] / summary[best]["tokens_per_s_mean"]
  doc = dict(date=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), host=platform.node(),
             device=jax.devices()[0].device_kind, backend=jax.default_backend(), model=label, args=vars(args),
             summary=summary, best_fixed=best, auto_over_best=ratio, max_rep_spread_tokens_per_s=noise,
             auto_rounds_per_budget=auto_hist, auto_costs_s=engine.last_auto["cost_s"],
             outputs_differing_from_first_config=mismatches)
  os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
  with open(args.out, "w") as fh:
    json.dump(doc, fh, indent=1)
  print("\n| budget | tokens/s mean | min..max over reps | tau |")
  print("|---|---|---|---|")
  for c in configs:
    s = summary[c]
    print(f"| {c} | {s['tokens_per_s_mean']:.1f} | {s['tokens_per_s_min']:.1f}..{s['tokens_per_s_max']:.1f} | {s['tau']:.2f} |")
  print(f"\nbest fixed budget {best}; auto / best = {ratio:.3f}; largest spread over reps {noise:.1f} tokens/s; "
        f"auto rounds per budget {auto_hist}; outputs differing between configurations: {mismatches}\n"
        f"wrote {args.out}")


if __name__ == "__main__":
  main()
