"""ddtree-bench: acceptance (tau) and speed of AR, DFlash and DDTree over a prompt set.

  ddtree-bench                                   # embedded default model, shipped test-split prompts
  ddtree-bench --modes=ar,dflash,ddtree --budgets=8,16,32,64,128,256 --temperatures=0,1 \
      --max_new_tokens=128 --output_json=bench.json --plot=bench.png
  ddtree-bench --prompts=test_split --num_prompts=8   # fresh prompts from the stdlib test split

Each (mode, budget, temperature) runs every prompt at batch 1 after one warm-up generation (compile
excluded). tau = tokens emitted by speculative rounds / rounds (the bonus token included; AR is 1).
tokens/s = generated tokens / wall time (prefill included). At T=0 every output is compared with AR's.
"""
from __future__ import annotations

import json
import os
import sys
import time
from typing import Callable, Optional, Sequence

from absl import app, flags

from ddtree_jax.cli import common  # noqa: F401  (--prefill_chunk, --moe_layout)
from ddtree_jax.cli import distributed  # noqa: F401  (--mesh and the jax.distributed flags)

FLAGS = flags.FLAGS
flags.DEFINE_string("model_dir", None, "target directory (default: the embedded model)")
flags.DEFINE_string("drafter_dir", None, "DFlash drafter directory (default: the embedded drafter)")
flags.DEFINE_string("prompts", None, "JSONL file of {\"prompt\": ...} lines, or 'test_split' "
                    "(default: benchmarks/prompts/test_prompts.jsonl)")
flags.DEFINE_integer("num_prompts", 0, "use only the first N prompts (0 = all)")
flags.DEFINE_list("modes", ["ar", "dflash", "ddtree"], "modes to run")
flags.DEFINE_list("budgets", ["8", "16", "32", "64", "128", "256"], "DDTree budgets")
flags.DEFINE_list("temperatures", ["0", "1"], "sampling temperatures")
flags.DEFINE_integer("max_new_tokens", 128, "tokens per prompt")
flags.DEFINE_integer("seed", 0, "sampling seed, in [0, 2**32) (jax.random.key keeps 32 bits)", lower_bound=0,
                     upper_bound=2**32 - 1)
flags.DEFINE_string("dtype", "bfloat16", "bfloat16 or float32")
flags.DEFINE_float("time_budget_s", 0, "stop starting new runs after this many seconds (0 = no limit)")
flags.DEFINE_string("output_json", None, "write the results here")
flags.DEFINE_string("plot", None, "write a PNG (tau and tokens/s vs budget, accepted-length histogram)")

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_PROMPTS = os.path.join(REPO_ROOT, "benchmarks", "prompts", "test_prompts.jsonl")


def run_bench(engine, prompts: Sequence[Sequence[int]], *, modes=("ar", "dflash", "ddtree"),
              budgets=(8, 16, 32, 64, 128, 256), temperatures=(0.0, 1.0), max_new_tokens: int = 128, seed: int = 0,
              deadline: Optional[float] = None, on_record: Optional[Callable[[dict], None]] = None,
              log: Callable[[str], None] = print, rounds_per_call: Optional[int] = None) -> list[dict]:
  """Returns one record per (temperature, mode, budget). AR runs first at each temperature (the
  reference for the lossless check at T=0 and the speed-up). rounds_per_call: see Engine.run."""
  from ddtree_jax.sampling import SamplingParams
  records = []
  block = engine.drafter_cfg.block_size if engine.drafter_cfg is not None else 0
  for temp in temperatures:
    ar_tokens, ar_tps = None, None
    runs = [("ar", 0)] if "ar" in modes else []
    if engine.drafter_cfg is not None:
      runs += [("dflash", block - 1)] if "dflash" in modes else []
      runs += [("ddtree", int(b)) for b in budgets] if "ddtree" in modes else []
    for mode, budget in runs:
      if deadline is not None and time.perf_counter() > deadline:
        log(f"time budget reached: skipping T={temp} {mode} {budget or ''}")
        continue
      sp = SamplingParams(temperature=float(temp))
      t0 = time.perf_counter()
      engine.generate([prompts[0]], mode=mode, budget=max(budget, 1), sampling=sp, max_new_tokens=max_new_tokens,
                      seed=seed, rounds_per_call=rounds_per_call)
      compile_s = time.perf_counter() - t0
      tokens, rounds, emitted, wall, gen_s, outs, hist, per_tps = 0, 0, 0, 0.0, 0.0, [], {}, []
      for i, p in enumerate(prompts):
        if deadline is not None and time.perf_counter() > deadline and i >= 2:
          break
        t1 = time.perf_counter()
        r = engine.generate([p], mode=mode, budget=max(budget, 1), sampling=sp, max_new_tokens=max_new_tokens,
                            seed=seed + i, rounds_per_call=rounds_per_call)[0]
        wall += time.perf_counter() - t1
        tokens += len(r.token_ids)
        rounds += r.rounds
        emitted += sum(r.accepted_per_round)
        per_tps.append(r.tokens_per_s)
        gen_s += len(r.token_ids) / r.tokens_per_s if r.tokens_per_s else 0.0   # prefill + rounds, no compiling
        outs.append(r.token_ids)
        for a in r.accepted_per_round:
          hist[a] = hist.get(a, 0) + 1
      rec = {"mode": mode, "budget": budget if mode == "ddtree" else None, "temperature": float(temp),
             "prompts": len(outs), "generated_tokens": tokens, "rounds": rounds,
             # tokens_per_s: over the generation time of the requests (prefill + rounds), without the
             # compilation that a prompt of a new shape bucket triggers; tokens_per_s_wall includes it
             "tau": emitted / rounds if rounds else 0.0, "tokens_per_s": tokens / gen_s if gen_s else 0.0,
             "tokens_per_s_wall": tokens / wall if wall else 0.0,
             "median_request_tokens_per_s": sorted(per_tps)[len(per_tps) // 2] if per_tps else 0.0,
             "wall_s": wall, "warmup_s": compile_s,
             "accepted_histogram": {str(k): v for k, v in sorted(hist.items())}}
      if mode == "ar":
        ar_tokens, ar_tps = outs, rec["tokens_per_s"]
      if ar_tps:
        rec["speedup_vs_ar"] = rec["tokens_per_s"] / ar_tps
      if float(temp) == 0.0 and ar_tokens is not None and mode != "ar":
        n = min(len(ar_tokens), len(outs))
        rec["lossless_vs_ar"] = sum(a == b for a, b in zip(ar_tokens[:n], outs[:n]))
        rec["lossless_checked"] = n
      records.append(rec)
      log(f"T={temp} {mode:6s} {('N=' + str(budget)) if mode == 'ddtree' else '':6s} tau {rec['tau']:.2f}  "
          f"{rec['tokens_per_s']:.1f} tok/s  ({len(outs)} prompts, {rounds} rounds, warm-up {compile_s:.1f}s)"
          + (f"  = AR: {rec['lossless_vs_ar']}/{rec['lossless_checked']}" if "lossless_vs_ar" in rec else ""))
      if on_record:
        on_record(rec)
  return records


def plot_bench(records: list[dict], path: str, title: str = "") -> Optional[str]:
  try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
  except ImportError:
    return None
  temps = sorted({r["temperature"] for r in records})
  fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
  for t in temps:
    rs = [r for r in records if r["temperature"] == t]
    dd = sorted([r for r in rs if r["mode"] == "ddtree"], key=lambda r: r["budget"])
    df = [r for r in rs if r["mode"] == "dflash"]
    ar = [r for r in rs if r["mode"] == "ar"]
    line = axes[0].plot([r["budget"] for r in dd], [r["tau"] for r in dd], "o-", label=f"DDTree T={t:g}")[0]
    if df:
      axes[0].axhline(df[0]["tau"], ls="--", color=line.get_color(), label=f"DFlash T={t:g}")
    line = axes[1].plot([r["budget"] for r in dd], [r["tokens_per_s"] for r in dd], "o-", label=f"DDTree T={t:g}")[0]
    if df:
      axes[1].axhline(df[0]["tokens_per_s"], ls="--", color=line.get_color(), label=f"DFlash T={t:g}")
    if ar:
      axes[1].axhline(ar[0]["tokens_per_s"], ls=":", color=line.get_color(), label=f"AR T={t:g}")
  has_budgets = any(r["mode"] == "ddtree" for r in records)
  for ax, yl in ((axes[0], "tau (tokens / round)"), (axes[1], "tokens / s (batch 1)")):
    if has_budgets:            # without DDTree runs there is no budget axis (only the DFlash/AR lines)
      ax.set_xscale("log", base=2)
    ax.set_xlabel("DDTree budget N")
    ax.set_ylabel(yl)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
  # Histogram of accepted tokens per round: DFlash and the best DDTree at the lowest temperature.
  t0 = temps[0] if temps else 0.0
  cand = [r for r in records if r["temperature"] == t0 and r["mode"] in ("dflash", "ddtree")]
  best = max((r for r in cand if r["mode"] == "ddtree"), key=lambda r: r["tau"], default=None)
  for r, lab in ((next((r for r in cand if r["mode"] == "dflash"), None), "DFlash"),
                 (best, f"DDTree N={best['budget']}" if best else "")):
    if r is None:
      continue
    h = {int(k): v for k, v in r["accepted_histogram"].items()}
    tot = sum(h.values()) or 1
    ks = sorted(h)
    axes[2].bar([k + (0.2 if lab.startswith("DDTree") else -0.2) for k in ks], [h[k] / tot for k in ks], width=0.4,
                label=f"{lab} (tau {r['tau']:.2f})")
  axes[2].set_xlabel(f"accepted tokens per round (T={t0:g})")
  axes[2].set_ylabel("fraction of rounds")
  axes[2].legend(fontsize=8)
  axes[2].grid(alpha=0.3)
  if title:
    fig.suptitle(title)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path


def load_prompt_texts(spec: Optional[str], tok, n: int) -> list[str]:
  from ddtree_jax.train import prompts as P
  from ddtree_jax.cli.common import UsageError
  if spec == "test_split":
    items = P.test_prompts(tok, n or 16)
  else:
    path = spec or DEFAULT_PROMPTS
    if not os.path.exists(path):
      raise UsageError(f"--prompts={path}: no such file")
    items = P.read_jsonl(path)
  texts = [it["prompt"] for it in items]
  return texts[:n] if n else texts


def main(argv):
  del argv
  import jax
  from ddtree_jax.cli.common import UsageError, load_models, parse_dtype, parse_prefill_chunk
  from ddtree_jax.engine import DEFAULT_ROUNDS_PER_CALL, Engine
  try:
    dtype = parse_dtype(FLAGS.dtype)
    prefill_chunk = parse_prefill_chunk(FLAGS.prefill_chunk)
    budgets = [int(b) for b in FLAGS.budgets]
    temps = [float(t) for t in FLAGS.temperatures]
    bad = [m for m in FLAGS.modes if m not in ("ar", "dflash", "ddtree")]
    if bad:
      raise UsageError(f"--modes: unknown mode(s) {bad}; expected ar, dflash, ddtree")
    want_drafter = any(m != "ar" for m in FLAGS.modes)
    distributed.initialize()
    mesh = distributed.mesh_from_flags()
    target, cfg, drafter, dcfg, tok, label = load_models(FLAGS.model_dir, FLAGS.drafter_dir, dtype,
                                                         want_drafter=want_drafter, mesh=mesh)
    if tok is None:
      raise UsageError("the model directory has no tokenizer")
    texts = load_prompt_texts(FLAGS.prompts, tok, FLAGS.num_prompts)
    prompts = [tok.encode(t) for t in texts]
    engine = Engine(target, cfg, drafter, dcfg, mesh=mesh, prefill_chunk=prefill_chunk, moe_layout=FLAGS.moe_layout)
  except (UsageError, ValueError) as e:
    print(f"ddtree-bench: error: {e}", file=sys.stderr)
    return 2
  print(f"model: {label}; {len(prompts)} prompts; backend {jax.default_backend()} ({jax.devices()[0].device_kind}); "
        f"{distributed.describe(mesh)}", file=sys.stderr)
  deadline = time.perf_counter() + FLAGS.time_budget_s if FLAGS.time_budget_s else None
  meta = {"model": label, "backend": jax.default_backend(), "device": jax.devices()[0].device_kind,
          "prompts": len(prompts), "max_new_tokens": FLAGS.max_new_tokens, "dtype": FLAGS.dtype,
          "rounds_per_call": FLAGS.rounds_per_call or DEFAULT_ROUNDS_PER_CALL,
          "date": time.strftime("%Y-%m-%d %H:%M:%S")}
  records = []

  def save(rec=None):
    if FLAGS.output_json:
      tmp = FLAGS.output_json + ".tmp"
      with open(tmp, "w") as f:
        json.dump({"meta": meta, "records": records}, f, indent=1)
      os.replace(tmp, FLAGS.output_json)

  def on_record(rec):
    records.append(rec)
    save()

  run_bench(engine, prompts, modes=FLAGS.modes, budgets=budgets, temperatures=temps,
            max_new_tokens=FLAGS.max_new_tokens, seed=FLAGS.seed, deadline=deadline, on_record=on_record,
            log=lambda s: print(s, file=sys.stderr), rounds_per_call=FLAGS.rounds_per_call)
  print(summary_table(records))
  if FLAGS.plot:
    plot_bench(records, FLAGS.plot, f"{label} on {meta['device']}")
  return 0


def summary_table(records: list[dict]) -> str:
  lines = ["| T | mode | budget | tau | tokens/s | vs AR | = AR at T=0 |", "|---|---|---|---|---|---|---|"]
  for r in records:
    eq = f"{r['lossless_vs_ar']}/{r['lossless_checked']}" if "lossless_vs_ar" in r else ""
    lines.append(f"| {r['temperature']:g} | {r['mode']} | {r['budget'] or ''} | {r['tau']:.2f} | "
                 f"{r['tokens_per_s']:.1f} | {r.get('speedup_vs_ar', 0):.2f}x | {eq} |")
  return "\n".join(lines)


def run():
  app.run(lambda argv: sys.exit(main(argv)))


if __name__ == "__main__":
  run()
