"""ddtree-train-drafter: train a DFlash drafter for an exported target (REFERENCE.md section 2 recipe)
on continuations that the target generates from train-split stdlib prompts, and export it in the
public DFlash format.

  ddtree-train-drafter --target_dir=/tmp/ddtree_train/export/target --workdir=/tmp/ddtree_train \
      --time_budget_s=120
  ddtree-train-drafter ... --resume          # reuses the generated data and the latest orbax checkpoint
  ddtree-train-drafter ... --mesh=8x1 --batch=64

Validation: greedy continuations of --val_prompts val-split prompts (text neither model trained on).
Writes workdir/{drafter_data.npz, drafter_val_data.npz, drafter/ (orbax, history, loss and tau PNGs),
drafter_summary.json} and the drafter to --export_dir (default workdir/export/drafter).
Data parallel on all visible devices by default (--mesh=DATAxMODEL to choose; --batch must divide by DATA;
the continuations are generated on the same mesh); several hosts: the jax.distributed flags, the same
command on each, workdir on a filesystem all of them see.
"""
from __future__ import annotations

import dataclasses
import os
import sys

from absl import app, flags

from ddtree_jax.cli import distributed   # --mesh and the jax.distributed flags

FLAGS = flags.FLAGS
flags.DEFINE_enum("preset", "default", ["default", "tiny"], "drafter and training sizes (configs/default_model.py)")
flags.DEFINE_string("target_dir", None, "the exported target (HF layout with tokenizer.json)", required=True)
flags.DEFINE_string("workdir", None, "working directory (generated data, checkpoints)", required=True)
flags.DEFINE_string("export_dir", None, "where to write the drafter (default: workdir/export/drafter)")
flags.DEFINE_string("stdlib_root", None, "the Python standard library of the prompts (default: this interpreter's)")
flags.DEFINE_integer("max_files", 0, "use at most this many stdlib files for prompts (0 = all)")
flags.DEFINE_integer("num_prompts", 4096, "train-split prompts to continue")
flags.DEFINE_integer("prompt_len", 64, "prompt length in tokens")
flags.DEFINE_integer("max_new_tokens", 384, "continuation length")
flags.DEFINE_list("temperatures", ["0", "1"], "generation temperatures (prompts split evenly)")
flags.DEFINE_integer("val_prompts", 256, "val-split prompts continued greedily as the validation set (0: hold "
                     "out 5% of the train-split continuations instead)")
flags.DEFINE_integer("num_layers", 0, "drafter layers (0 = the preset's)")
flags.DEFINE_integer("gen_batch", 512, "generation batch size")
flags.DEFINE_float("gen_time_budget_s", 0, "stop generating after this many seconds (0 = no limit)")
flags.DEFINE_integer("max_steps", 0, "override the preset's step count (0 = keep)")
flags.DEFINE_integer("batch", 0, "override the batch size (0 = keep)")
flags.DEFINE_float("time_budget_s", 0, "fit the cosine schedule to this many seconds (0 = max_steps)")
flags.DEFINE_boolean("resume", False, "reuse generated data and continue from the latest checkpoint")
flags.DEFINE_boolean("progress", True, "show a progress bar")


def main(argv):
  del argv
  from configs import default_model as dm
  from ddtree_jax.cli.common import UsageError
  from ddtree_jax.engine import Engine
  from ddtree_jax.train import data_parallel, pipeline
  _, make_d, _, make_dhp = dm.PRESETS[FLAGS.preset]
  hp = make_dhp()
  over = {k: getattr(FLAGS, k) for k in ("max_steps", "batch") if getattr(FLAGS, k)}
  hp = dataclasses.replace(hp, **over)
  try:
    mesh = distributed.trainer_mesh(hp.batch, preset=FLAGS.preset, batch_flag_given=bool(FLAGS.batch))
  except (UsageError, ValueError) as e:
    print(f"ddtree-train-drafter: error: {e}", file=sys.stderr)
    return 2
  print(f"ddtree-train-drafter: {distributed.describe(mesh)}, batch {hp.batch}", file=sys.stderr)
  if not os.path.exists(os.path.join(FLAGS.target_dir, "config.json")):
    print(f"ddtree-train-drafter: error: --target_dir={FLAGS.target_dir} has no config.json", file=sys.stderr)
    return 2
  target, cfg, _, _, tok = pipeline.load_pair(FLAGS.target_dir)
  if tok is None:
    print(f"ddtree-train-drafter: error: {FLAGS.target_dir} has no tokenizer.json", file=sys.stderr)
    return 2
  try:
    data = distributed.process_0_first(lambda: pipeline.prepare_corpus(
        FLAGS.workdir, cfg.vocab_size, max_files=FLAGS.max_files or None, stdlib_root=FLAGS.stdlib_root,
        tokenizer_path=os.path.join(FLAGS.target_dir, "tokenizer.json")))
  except (ValueError, FileNotFoundError) as e:   # a workdir built from another stdlib, or no stdlib there
    print(f"ddtree-train-drafter: error: {e}", file=sys.stderr)
    return 2
  engine = Engine(target, cfg, mesh=mesh)
  seqs = pipeline.generate_drafter_data(
      engine, tok, data["streams"]["train"], FLAGS.workdir, num_prompts=FLAGS.num_prompts,
      prompt_len=FLAGS.prompt_len, max_new_tokens=FLAGS.max_new_tokens,
      temperatures=tuple(float(t) for t in FLAGS.temperatures), batch=FLAGS.gen_batch,
      time_budget_s=FLAGS.gen_time_budget_s or None, resume=FLAGS.resume)
  val_seqs = pipeline.generate_drafter_val_data(
      engine, tok, data["streams"]["val"], FLAGS.workdir, num_prompts=FLAGS.val_prompts,
      prompt_len=FLAGS.prompt_len, max_new_tokens=FLAGS.max_new_tokens, batch=FLAGS.gen_batch, resume=FLAGS.resume)
  del target, engine
  export_dir = FLAGS.export_dir or os.path.join(FLAGS.workdir, "export", "drafter")
  dcfg = make_d(cfg, num_layers=FLAGS.num_layers) if FLAGS.num_layers else make_d(cfg)
  s = pipeline.train_and_export_drafter(FLAGS.target_dir, dcfg, hp, seqs, FLAGS.workdir, export_dir,
                                        val_seqs=val_seqs, time_budget_s=FLAGS.time_budget_s or None,
                                        resume=FLAGS.resume, progress=FLAGS.progress, mesh=mesh)
  if data_parallel.is_writer():
    print(f"drafter val loss {s['val_loss']:.4f}, estimated tau {s['val_tau_est']:.2f}; exported "
          f"{s['export_bytes'] / 2**20:.1f} MiB to {export_dir}")
  return 0


def run():
  app.run(lambda argv: sys.exit(main(argv)))


if __name__ == "__main__":
  run()
