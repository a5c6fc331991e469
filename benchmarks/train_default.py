"""The whole embedded-default pipeline in one run (on one H200: about 13 minutes, or 8 with --target_dir):

corpus (this interpreter's stdlib) + BPE tokenizer -> target pretraining (time-boxed) -> INT4 experts,
val loss before/after -> continuations by the INT4 target (greedy and T=1) -> DFlash drafter training
(time-boxed) -> export (HF layout) -> ddtree-bench (ar, dflash, ddtree N=8..256, T=0 and T=1) on
test-split prompts. Everything lands under --out ($OUT on the device machine), saved phase by phase:
  log.txt, bench.json, results.tar.gz (summaries, histories, loss PNGs, bench PNG, prompts),
  checkpoints.tar.gz.partNN (checkpoints/default/{target,drafter}, split under 15 MB).

  PYTHONPATH=. python3 benchmarks/train_default.py               # GPU, default sizes
  PYTHONPATH=. python3 benchmarks/train_default.py --target_dir checkpoints/default/target --temperatures 0 \
      --budgets 32,128 --total_s 565  # the shipped drafter's run: only the drafter is retrained (fits a 10-minute call)
  PYTHONPATH=. python3 benchmarks/train_default.py --smoke       # CPU, tiny sizes, ~3 minutes
"""
from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tarfile
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
T0 = time.perf_counter()


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--out", default=os.environ.get("OUT", os.path.join(ROOT, "out_train_default")))
  ap.add_argument("--smoke", action="store_true", help="tiny sizes and budgets (CPU check of the script)")
  ap.add_argument("--total_s", type=float, default=780, help="end of the bench phase (seconds from start)")
  ap.add_argument("--target_s", type=float, default=165)
  ap.add_argument("--gen_s", type=float, default=90)
  ap.add_argument("--drafter_s", type=float, default=270)
  ap.add_argument("--max_new_tokens", type=int, default=128)
  ap.add_argument("--stdlib_root", default=None, help="the Python stdlib to train on (default: this interpreter's)")
  ap.add_argument("--gen_prompts", type=int, default=98304, help="train-split prompts continued for the drafter data")
  ap.add_argument("--temperatures", default="0,1", help="bench temperatures")
  ap.add_argument("--num_test_prompts", type=int, default=16)
  ap.add_argument("--target_dir", default=None,
                  help="an exported target (e.g. checkpoints/default/target) to reuse: skips target training and "
                       "encodes the corpus with its tokenizer")
  ap.add_argument("--drafter_layers", type=int, default=None, help="drafter layers (default: the preset's)")
  ap.add_argument("--gen_batch", type=int, default=2048, help="generation batch (sequences per AR call)")
  ap.add_argument("--val_prompts", type=int, default=512,
                  help="val-split prompts continued greedily for the drafter's validation (0: hold out 5%% of the "
                       "train-split continuations instead)")
  ap.add_argument("--budgets", default=None, help="bench budgets (default 8,16,32,64,128,256)")
  ap.add_argument("--modes", default="ar,dflash,ddtree", help="bench modes")
  args = ap.parse_args()
  out = os.path.abspath(args.out)
  os.makedirs(out, exist_ok=True)
  work = os.path.join(out, "work") if args.smoke else "/tmp/ddtree_train_default"
  os.makedirs(work, exist_ok=True)
  logf = open(os.path.join(out, "log.txt"), "a")

  def log(msg):
    line = f"[{time.perf_counter() - T0:6.1f}s] {msg}"
    print(line, flush=True)
    logf.write(line + "\n")
    logf.flush()

  import jax
  import numpy as np
  from configs import default_model as dm
  from ddtree_jax.train import pipeline, prompts as P
  log(f"jax {jax.__version__}, backend {jax.default_backend()}, devices {jax.devices()}, python {sys.version.split()[0]}")
  preset = "tiny" if args.smoke else "default"
  make_t, make_d, make_thp, make_dhp = dm.PRESETS[preset]
  export_root = os.path.join(work, "checkpoints", "default")
  tdir, ddir = os.path.join(export_root, "target"), os.path.join(export_root, "drafter")
  results = {"preset": preset}
  bench_records = []

  def save_results():
    import glob
    with open(os.path.join(work, "results.json"), "w") as f:
      json.dump(results, f, indent=1)
    with tarfile.open(os.path.join(out, "results.tar.gz"), "w:gz") as tf:
      for pat in ("results.json", "corpus.json", "*_summary.json", "target/*.json", "target/*.png", "drafter/*.json",
                  "drafter/*.png", "bench*.png", "bench*.json", "test_prompts.jsonl"):
        for p in glob.glob(os.path.join(work, pat)):
          tf.add(p, arcname=os.path.relpath(p, work))

  def save_checkpoints():
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
      tf.add(export_root, arcname="checkpoints/default")
    data = buf.getvalue()
    for old in os.listdir(out):
      if old.startswith("checkpoints.tar.gz.part"):
        os.remove(os.path.join(out, old))
    chunk = 15 * 2**20
    for i in range(0, len(data), chunk):
      with open(os.path.join(out, f"checkpoints.tar.gz.part{i // chunk:02d}"), "wb") as f:
        f.write(data[i:i + chunk])
    log(f"checkpoints archived: {len(data) / 2**20:.1f} MiB")

  # ---- 1. corpus + tokenizer --------------------------------------------------------------------
  tcfg0 = make_t()
  reuse_tok = os.path.join(args.target_dir, "tokenizer.json") if args.target_dir else None
  data = pipeline.prepare_corpus(work, tcfg0.vocab_size, max_files=30 if args.smoke else None,
                                 stdlib_root=args.stdlib_root, tokenizer_path=reuse_tok, log=log)
  results["corpus"] = {k: v for k, v in data["info"].items() if k != "test_files"}
  tok = data["tokenizer"]
  from ddtree_jax.train import corpus
  tp = P.test_prompts(tok, args.num_test_prompts, seed=0,
                      docs=corpus.load_split("test", root=args.stdlib_root, max_files=30 if args.smoke else None),
                      min_tokens=24 if args.smoke else 64, max_tokens=40 if args.smoke else 90)
  P.write_jsonl(os.path.join(work, "test_prompts.jsonl"), tp)
  log(f"{len(tp)} test prompts")
  save_results()

  # ---- 2. target --------------------------------------------------------------------------------
  if args.target_dir:
    import shutil
    if os.path.realpath(args.target_dir) == os.path.realpath(tdir):
      raise SystemExit(f"--target_dir={args.target_dir} is this run's own export directory; copy it elsewhere first")
    if os.path.exists(tdir):
      shutil.rmtree(tdir)
    shutil.copytree(args.target_dir, tdir)
    with open(os.path.join(tdir, "training_info.json")) as f:
      results["target"] = dict(json.load(f).get("target_training", {}), reused_from=os.path.abspath(args.target_dir))
    log(f"target reused from {args.target_dir}")
  else:
    tcfg, thp = make_t(tok.vocab_size), make_thp()
    results["target"] = pipeline.train_and_export_target(tcfg, thp, data, work, tdir, time_budget_s=args.target_s,
                                                         progress=False, log=log)
  save_results()
  save_checkpoints()

  # ---- 3. continuations by the INT4 target -----------------------------------------------------
  from ddtree_jax.engine import Engine
  target, cfg4, _, _, tok = pipeline.load_pair(tdir)
  engine = Engine(target, cfg4)
  n_prompts = 64 if args.smoke else args.gen_prompts
  seqs = pipeline.with_xla_kernels(
      pipeline.generate_drafter_data, engine, tok, data["streams"]["train"], work, num_prompts=n_prompts,
      prompt_len=32 if args.smoke else 64, max_new_tokens=48 if args.smoke else 384,
      batch=32 if args.smoke else args.gen_batch, time_budget_s=args.gen_s, resume=False, log=log)
  val_seqs = pipeline.with_xla_kernels(
      pipeline.generate_drafter_val_data, engine, tok, data["streams"]["val"], work,
      num_prompts=16 if args.smoke and args.val_prompts else args.val_prompts, prompt_len=32 if args.smoke else 64,
      max_new_tokens=48 if args.smoke else 384, batch=32 if args.smoke else args.gen_batch, resume=False, log=log)
  results["generation"] = {"sequences": len(seqs), "tokens": int(sum(len(s) - p for s, p in seqs)),
                           "val_sequences": len(val_seqs or ()), "seconds_budget": args.gen_s}
  del engine, target
  save_results()

  # ---- 4. drafter -------------------------------------------------------------------------------
  dcfg = make_d(cfg4) if args.drafter_layers is None else make_d(cfg4, num_layers=args.drafter_layers)
  dhp = make_dhp()
  results["drafter"] = pipeline.train_and_export_drafter(tdir, dcfg, dhp, seqs, work, ddir, val_seqs=val_seqs,
                                                         time_budget_s=args.drafter_s, progress=False, log=log)
  import shutil
  shutil.copyfile(os.path.join(work, "test_prompts.jsonl"), os.path.join(export_root, "test_prompts.jsonl"))
  save_results()
  save_checkpoints()

  # ---- 5. bench ---------------------------------------------------------------------------------
  from ddtree_jax.cli.bench import plot_bench, run_bench, summary_table
  target, cfg4, drafter, dcfg, tok = pipeline.load_pair(tdir, ddir)
  engine = Engine(target, cfg4, drafter, dcfg)
  prompt_ids = [tok.encode(p["prompt"]) for p in tp]
  meta = {"device": jax.devices()[0].device_kind, "backend": jax.default_backend(), "prompts": len(prompt_ids),
          "max_new_tokens": args.max_new_tokens, "date": time.strftime("%Y-%m-%d %H:%M:%S"),
          "python": sys.version.split()[0], "jax": jax.__version__}

  def on_record(rec):
    bench_records.append(rec)
    with open(os.path.join(out, "bench.json"), "w") as f:
      json.dump({"meta": meta, "records": bench_records}, f, indent=1)

  budgets = (8, 16, 32, 64, 128, 256) if not args.smoke else (4, 16)
  if args.budgets:
    budgets = tuple(int(b) for b in args.budgets.split(","))
  deadline = T0 + args.total_s
  pipeline.with_xla_kernels(run_bench, engine, prompt_ids, budgets=budgets, modes=tuple(args.modes.split(",")),
                            temperatures=tuple(float(t) for t in args.temperatures.split(",")),
                            max_new_tokens=args.max_new_tokens if not args.smoke else 24, deadline=deadline,
                            on_record=on_record, log=log)
  with open(os.path.join(work, "bench.json"), "w") as f:
    json.dump({"meta": meta, "records": bench_records}, f, indent=1)
  plot_bench(bench_records, os.path.join(work, "bench.png"), f"embedded default on {meta['device']}")
  log("\n" + summary_table(bench_records))
  results["bench_meta"] = meta
  save_results()
  log("done")


if __name__ == "__main__":
  try:
    main()
  except Exception:
    traceback.print_exc()
    out = os.environ.get("OUT")
    if out:
      with open(os.path.join(out, "log.txt"), "a") as f:
        f.write(traceback.format_exc())
    sys.exit(1)
