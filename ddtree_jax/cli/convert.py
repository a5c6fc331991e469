"""ddtree-convert: an HF target (+ DFlash drafter) directory -> a converted orbax directory.

  ddtree-convert --hf_dir=/models/Kimi-K2.6 --drafter_dir=/models/Kimi-K2.6-DFlash \\
      --out_dir=/models/k26-ddtree --mesh=1x8 --dtype=bfloat16

Checks every shard header first, then converts one decoder layer at a time (host memory ~ one shard),
into <out_dir>.tmp-<pid>, renamed to out_dir at the end: a failure leaves no output directory.
--mesh=DATAxMODEL and the jax.distributed flags as in every CLI (cli/distributed.py): the arrays are saved
in the partition rules of ddtree_jax/sharding.py on that mesh (default: 1 x all visible devices; a single
device: unsharded). Several hosts: the same command in each, out_dir on a filesystem all of them see.
"""
from __future__ import annotations

import logging
import sys

from absl import app, flags

from ddtree_jax.cli import distributed   # --mesh and the jax.distributed flags

FLAGS = flags.FLAGS
flags.DEFINE_string("hf_dir", None, "Hugging Face target directory (config.json + safetensors shards).")
flags.DEFINE_string("drafter_dir", None, "Optional DFlash drafter directory, checked against the target.")
flags.DEFINE_string("out_dir", None, "Output directory (must not exist unless --overwrite).")
flags.DEFINE_string("dtype", "bfloat16", "Dtype of the non-quantized parameters: bfloat16 or float32.")
flags.DEFINE_bool("overwrite", False, "Replace an existing out_dir.")
flags.DEFINE_bool("progress", True, "Show a progress bar.")


def main(argv):
  del argv
  from ddtree_jax.checkpoint import CheckpointError
  from ddtree_jax.checkpoint.convert import convert_checkpoint
  from ddtree_jax.config import ConfigError
  from ddtree_jax.cli.common import UsageError, parse_dtype
  logging.getLogger("ddtree_jax.checkpoint").setLevel(logging.INFO)
  try:
    for f in ("hf_dir", "out_dir"):
      if not getattr(FLAGS, f):
        raise UsageError(f"--{f} is required")
    dtype = parse_dtype(FLAGS.dtype)
    distributed.initialize()
    mesh = distributed.mesh_from_flags()
    print(f"ddtree-convert: saving for {distributed.describe(mesh)}", file=sys.stderr)
    bar = None
    if FLAGS.progress:
      from tqdm import tqdm
      bar = tqdm(total=0, unit="B", unit_scale=True, unit_divisor=1024, desc="convert", dynamic_ncols=True)
    n = {"tensors": 0}

    class Progress:
      def reset(self, total):
        if bar is not None:
          bar.reset(total=total)

      def update(self, nbytes):
        n["tensors"] += 1
        if bar is not None:
          bar.update(nbytes)
          bar.set_postfix(tensors=n["tensors"], refresh=False)

    manifest = convert_checkpoint(FLAGS.hf_dir, FLAGS.out_dir, drafter_dir=FLAGS.drafter_dir, dtype=dtype, mesh=mesh,
                                  overwrite=FLAGS.overwrite, progress=Progress())
    if bar is not None:
      bar.close()
  except UsageError as e:              # a bad flag: exit 2, like the other CLIs
    print(f"ddtree-convert: error: {e}", file=sys.stderr)
    return 2
  except (CheckpointError, ConfigError) as e:   # the input or output directory is not what it must be
    print(f"ddtree-convert: error: {e}", file=sys.stderr)
    return 1
  groups = manifest["target"]["groups"]
  print(f"ddtree-convert: wrote {FLAGS.out_dir}: {n['tensors']} tensors, {len(groups)} target groups"
        f"{', drafter' if manifest['drafter'] else ''}; {manifest['skipped']}")
  return 0


def run():
  app.run(main)


if __name__ == "__main__":
  run()
