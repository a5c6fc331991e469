"""Wall time per round of the engine on the embedded default model, and where the host spends it.

Each mode:budget and each --rounds_per_call K generates every prompt at batch 1, once to compile, then --reps
times; reports tokens/s and wall time per round (generate's wall time, median over the reps), and the time per
round on the engine's own clock (prefill and rounds only: GenerationResult.tokens_per_s); the tokens must be the
same for every K (and every --topk_stages setting: "auto,one" times the drafter's two-stage top-K of
ddtree_jax/topk.py against lax.top_k in one process). With --trace_dir, one more generation of the first prompt
runs under jax.profiler and its XSpace is copied to <trace_dir>/<mode>_<budget>_k<K>.xplane.pb:
`xplane_timeline.py FILE --plane /host:CPU` lists the host's events by total time (the compiled call, argument
parsing, XLA's command-buffer update and graph launch), and without --plane the device's kernels.

  PYTHONPATH=. python3 benchmarks/engine_rounds.py --out $OUT/engine_rounds.json --trace_dir $OUT/trace
(GPU; it runs on the CPU too.) Issue 6's thirteenth round ran this script under its former name, run_ahead.py
(commit a36dcf0), which also compared the Engine's run-ahead experiment of that commit.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import xplane_timeline  # noqa: E402
import ddtree_jax.engine as engine_module  # noqa: E402
import ddtree_jax.topk as topk_module  # noqa: E402
from ddtree_jax.engine import Engine  # noqa: E402
from ddtree_jax.train import pipeline  # noqa: E402
from ddtree_jax.train.common import write_json  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


_TOPK_DEFAULT_CHUNK = topk_module.default_chunk


def _one_stage(v, k, rows=1, backend=None):
  """default_chunk's stand-in for --topk_stages one: never chunk (lax.top_k itself)."""
  return None


def use_topk_stages(stages: str):
  """The drafter's top-K as ddtree_jax/topk.py chooses ("auto") or lax.top_k everywhere ("one"); the engine's
  compiled programs are dropped whenever the setting changes, so the next call traces it."""
  want = _TOPK_DEFAULT_CHUNK if stages == "auto" else _one_stage
  if topk_module.default_chunk is not want:
    topk_module.default_chunk = want
    engine_module._COMPILED.clear()


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--target", default=os.path.join(ROOT, "checkpoints/default/target"))
  ap.add_argument("--drafter", default=os.path.join(ROOT, "checkpoints/default/drafter"))
  ap.add_argument("--prompts", default=os.path.join(ROOT, "benchmarks/prompts/test_prompts.jsonl"))
  ap.add_argument("--num_prompts", type=int, default=8)
  ap.add_argument("--runs", default="ar:1,ddtree:8,ddtree:32", help="mode:budget,...")
  ap.add_argument("--max_new_tokens", type=int, default=128)
  ap.add_argument("--reps", type=int, default=3)
  ap.add_argument("--rounds_per_call", default="1", help="K values, e.g. 1,4,8 (Engine.run rounds_per_call)")
  ap.add_argument("--dtype", default="bfloat16")
  ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "engine_rounds.json"))
  ap.add_argument("--trace_dir", default=None, help="also trace one generation per run with jax.profiler")
  ap.add_argument("--topk_stages", default="auto",
                  help="the drafter's top-K: auto (ddtree_jax/topk.py's choice), one (lax.top_k everywhere), or "
                       "both, e.g. auto,one (an A/B in one process; the tokens must agree)")
  a = ap.parse_args(argv)
  stage_settings = [v for v in a.topk_stages.split(",") if v]
  if not stage_settings or set(stage_settings) - {"auto", "one"}:
    raise SystemExit(f"engine_rounds: --topk_stages {a.topk_stages!r}: expected auto, one or both")
  target, cfg, drafter, dcfg, tok = pipeline.load_pair(a.target, a.drafter, dtype=jnp.dtype(a.dtype))
  eng = Engine(target, cfg, drafter, dcfg)
  with open(a.prompts) as fh:
    prompts = [tok.encode(json.loads(line)["prompt"]) for line in fh if line.strip()][:a.num_prompts]
  rows = []
  for run in a.runs.split(","):
    mode, budget = run.split(":")
    budget = int(budget)
    tokens = None
    for stages, k in [(st, int(v)) for st in stage_settings for v in a.rounds_per_call.split(",")]:
      use_topk_stages(stages)
      def generate_all():
        t0 = time.perf_counter()
        res = [eng.generate([p], mode=mode, budget=budget, max_new_tokens=a.max_new_tokens, rounds_per_call=k)[0]
               for p in prompts]
        return time.perf_counter() - t0, res

      _, first = generate_all()                                 # compiles
      tokens = tokens or [r.token_ids for r in first]
      times, inside = [], []
      for _ in range(a.reps):
        elapsed, res = generate_all()
        times.append(elapsed)
        # the engine's own clock (GenerationResult.tokens_per_s): prefill and rounds, without the state's set-up,
        # the program lookups and the results' read-back
        inside.append(sum(len(r.token_ids) / r.tokens_per_s for r in res if r.tokens_per_s > 0))
        if [r.token_ids for r in res] != tokens:
          raise AssertionError(f"{mode} {budget} rounds_per_call {k} top-K {stages}: the tokens differ from the "
                               "first setting's")
      generated = sum(len(t) for t in tokens)
      rounds = sum(r.rounds for r in first)
      med = statistics.median(times)
      row = dict(mode=mode, budget=budget, rounds_per_call=k, topk_stages=stages, prompts=len(prompts),
                 generated=generated, rounds=rounds, seconds=med, all_seconds=times, tokens_per_s=generated / med,
                 ms_per_round=1e3 * med / rounds, tau=sum(sum(r.accepted_per_round) for r in first) / rounds,
                 engine_seconds=statistics.median(inside), engine_ms_per_round=1e3 * statistics.median(inside) / rounds)
      if a.trace_dir:
        where = os.path.join(a.trace_dir, f"{mode}_{budget}_k{k}" + ("" if stages == "auto" else f"_{stages}"))
        xplane_timeline.record(lambda: eng.generate(prompts[:1], mode=mode, budget=budget,
                                                    max_new_tokens=a.max_new_tokens, rounds_per_call=k), where)
      rows.append(row)
      print(f"{mode} N={budget} rounds_per_call {k} top-K {stages}: {generated} tokens in {rounds} rounds "
            f"(tau {row['tau']:.2f}), "
            f"{row['tokens_per_s']:.0f} tok/s, {row['ms_per_round']:.3f} ms/round "
            f"(engine clock {row['engine_ms_per_round']:.3f})", flush=True)
  write_json(a.out, dict(device=jax.devices()[0].device_kind, backend=jax.default_backend(), dtype=a.dtype,
                         max_new_tokens=a.max_new_tokens, date=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                         argv=sys.argv[1:], rows=rows))
  return rows


if __name__ == "__main__":
  main()
