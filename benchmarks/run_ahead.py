"""Engine.run_ahead on and off: the same generations, timed, on the embedded default model.

With run_ahead the host enqueues round k + 1 before it reads round k's done flags (engine.py
_rounds_run_ahead), so the device does not wait, every round, for the host to read back a flag and dispatch the
next program. Each (mode, budget) generates every prompt at batch 1, once to compile, then --reps times per
setting, the settings alternating; the tokens must be identical. Reports tokens/s (prefill included) and wall
time per round, medians over the reps.

  PYTHONPATH=. python3 benchmarks/run_ahead.py --out $OUT/run_ahead.json      (GPU; runs on the CPU too)
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import xplane_timeline  # noqa: E402
from ddtree_jax.engine import Engine
from ddtree_jax.train import pipeline
from ddtree_jax.train.common import write_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--target", default=os.path.join(ROOT, "checkpoints/default/target"))
  ap.add_argument("--drafter", default=os.path.join(ROOT, "checkpoints/default/drafter"))
  ap.add_argument("--prompts", default=os.path.join(ROOT, "benchmarks/prompts/test_prompts.jsonl"))
  ap.add_argument("--num_prompts", type=int, default=8)
  ap.add_argument("--runs", default="ar:1,ddtree:8,ddtree:32", help="mode:budget,...")
  ap.add_argument("--max_new_tokens", type=int, default=128)
  ap.add_argument("--reps", type=int, default=3)
  ap.add_argument("--dtype", default="bfloat16")
  ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "run_ahead.json"))
  ap.add_argument("--trace_dir", default=None, help="also trace one generation per run with jax.profiler: "
                  "<trace_dir>/<mode>_<budget>_<setting>.xplane.pb (benchmarks/xplane_timeline.py reads it)")
  a = ap.parse_args(argv)
  target, cfg, drafter, dcfg, tok = pipeline.load_pair(a.target, a.drafter, dtype=jnp.dtype(a.dtype))
  eng = Engine(target, cfg, drafter, dcfg)
  with open(a.prompts) as fh:
    prompts = [tok.encode(json.loads(line)["prompt"]) for line in fh if line.strip()][:a.num_prompts]
  rows = []
  for run in a.runs.split(","):
    mode, budget = run.split(":")
    budget = int(budget)

    def generate_all():
      t0 = time.perf_counter()
      res = [eng.generate([p], mode=mode, budget=budget, max_new_tokens=a.max_new_tokens)[0] for p in prompts]
      return time.perf_counter() - t0, res

    generate_all()                                           # compiles
    times = {False: [], True: []}
    tokens = {}
    for _ in range(a.reps):
      for ahead in (False, True):
        eng.run_ahead = ahead
        elapsed, res = generate_all()
        times[ahead].append(elapsed)
        toks = [r.token_ids for r in res]
        if tokens.setdefault(ahead, toks) != toks:
          raise AssertionError(f"run_ahead={ahead}: tokens changed between repetitions ({mode} {budget})")
        rounds = sum(r.rounds for r in res)
        generated = sum(len(t) for t in toks)
    if tokens[True] != tokens[False]:
      raise AssertionError(f"{mode} {budget}: run_ahead changed the tokens")
    if a.trace_dir:
      for ahead in (False, True):
        eng.run_ahead = ahead
        where = os.path.join(a.trace_dir, f"{mode}_{budget}_{'ahead' if ahead else 'one'}")
        jax.profiler.start_trace(where)
        eng.generate(prompts[:1], mode=mode, budget=budget, max_new_tokens=a.max_new_tokens)
        jax.profiler.stop_trace()
        shutil.copy(xplane_timeline.find_trace(where), where + ".xplane.pb")
    row = dict(mode=mode, budget=budget, prompts=len(prompts), generated=generated, rounds=rounds)
    for ahead, name in ((False, "one_at_a_time"), (True, "run_ahead")):
      med = statistics.median(times[ahead])
      row[name] = dict(seconds=med, all_seconds=times[ahead], tokens_per_s=generated / med,
                       ms_per_round=1e3 * med / rounds)
    row["speedup"] = row["one_at_a_time"]["seconds"] / row["run_ahead"]["seconds"]
    rows.append(row)
    print(f"{mode} N={budget}: {generated} tokens in {rounds} rounds; one at a time "
          f"{row['one_at_a_time']['tokens_per_s']:.0f} tok/s ({row['one_at_a_time']['ms_per_round']:.3f} ms/round), "
          f"run ahead {row['run_ahead']['tokens_per_s']:.0f} tok/s ({row['run_ahead']['ms_per_round']:.3f} ms/round): "
          f"x{row['speedup']:.2f}", flush=True)
  eng.run_ahead = Engine.run_ahead
  write_json(a.out, dict(device=jax.devices()[0].device_kind, backend=jax.default_backend(), dtype=a.dtype,
                         max_new_tokens=a.max_new_tokens, date=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                         argv=sys.argv[1:], rows=rows))
  return rows


if __name__ == "__main__":
  main()
