"""ddtree-train-target: pretrain a small Kimi K2.6-architecture target on the Python stdlib and export
it (INT4 routed experts, HF layout).

  ddtree-train-target --workdir=/tmp/ddtree_train --time_budget_s=180          # the default preset
  ddtree-train-target --workdir=/tmp/ddtree_train --resume                     # continue after an interruption
  ddtree-train-target --preset=tiny --max_files=30 --max_steps=20              # a CPU-sized check
  ddtree-train-target --workdir=/tmp/ddtree_train --mesh=4x2                    # batch over 4, params split 2

Writes workdir/{tokenizer.json, tokens_*.npy, corpus.json, target/ (orbax checkpoints, history, loss PNG),
target_summary.json} and the exported model to --export_dir (default workdir/export/target).
Data parallel on all visible devices by default (--mesh=DATAxMODEL to choose; --batch must divide by DATA);
several hosts: the jax.distributed flags, the same command on each, workdir on a filesystem all of them see.
"""
from __future__ import annotations

import dataclasses
import os
import sys

from absl import app, flags

from ddtree_jax.cli import distributed   # --mesh and the jax.distributed flags

FLAGS = flags.FLAGS
flags.DEFINE_enum("preset", "default", ["default", "tiny"], "model and training sizes (configs/default_model.py)")
flags.DEFINE_string("workdir", None, "working directory (checkpoints, tokenizer, token caches)", required=True)
flags.DEFINE_string("export_dir", None, "where to write the HF-layout target (default: workdir/export/target)")
flags.DEFINE_integer("vocab_size", 0, "BPE vocabulary (0 = the preset's)")
flags.DEFINE_string("stdlib_root", None, "the Python standard library to train on (default: this interpreter's)")
flags.DEFINE_integer("max_files", 0, "use at most this many stdlib files per split (0 = all)")
flags.DEFINE_integer("max_steps", 0, "override the preset's step count (0 = keep)")
flags.DEFINE_integer("batch", 0, "override the batch size (0 = keep)")
flags.DEFINE_integer("seq_len", 0, "override the training sequence length (0 = keep)")
flags.DEFINE_float("lr", 0, "override the peak learning rate (0 = keep)")
flags.DEFINE_float("time_budget_s", 0, "fit the cosine schedule to this many seconds of training (0 = max_steps)")
flags.DEFINE_boolean("resume", False, "continue from the latest orbax checkpoint in workdir/target")
flags.DEFINE_boolean("progress", True, "show a progress bar")


def main(argv):
  del argv
  from configs import default_model as dm
  from ddtree_jax.cli.common import UsageError
  from ddtree_jax.train import data_parallel, pipeline
  make_t, _, make_thp, _ = dm.PRESETS[FLAGS.preset]
  vocab = FLAGS.vocab_size or make_t().vocab_size
  hp = make_thp()
  over = {k: getattr(FLAGS, k) for k in ("max_steps", "batch", "seq_len", "lr") if getattr(FLAGS, k)}
  hp = dataclasses.replace(hp, **over)
  try:
    mesh = distributed.trainer_mesh(hp.batch, preset=FLAGS.preset, batch_flag_given=bool(FLAGS.batch))
  except (UsageError, ValueError) as e:
    print(f"ddtree-train-target: error: {e}", file=sys.stderr)
    return 2
  print(f"ddtree-train-target: {distributed.describe(mesh)}, batch {hp.batch}", file=sys.stderr)
  try:
    data = distributed.process_0_first(lambda: pipeline.prepare_corpus(
        FLAGS.workdir, vocab, max_files=FLAGS.max_files or None, stdlib_root=FLAGS.stdlib_root))
  except (ValueError, FileNotFoundError) as e:   # a workdir built from another stdlib, or no stdlib there
    print(f"ddtree-train-target: error: {e}", file=sys.stderr)
    return 2
  cfg = make_t(data["tokenizer"].vocab_size)
  if hp.seq_len > cfg.max_position_embeddings:
    print(f"ddtree-train-target: error: --seq_len={hp.seq_len} exceeds max_position_embeddings "
          f"{cfg.max_position_embeddings}", file=sys.stderr)
    return 2
  export_dir = FLAGS.export_dir or os.path.join(FLAGS.workdir, "export", "target")
  s = pipeline.train_and_export_target(cfg, hp, data, FLAGS.workdir, export_dir,
                                       time_budget_s=FLAGS.time_budget_s or None, resume=FLAGS.resume,
                                       progress=FLAGS.progress, mesh=mesh)
  if data_parallel.is_writer():
    print(f"val loss {s['val_loss_bf16']:.4f} (bf16) -> {s['val_loss_int4']:.4f} (INT4 experts); "
          f"exported {s['export_bytes'] / 2**20:.1f} MiB to {export_dir}")
  return 0


def run():
  app.run(lambda argv: sys.exit(main(argv)))


if __name__ == "__main__":
  run()
