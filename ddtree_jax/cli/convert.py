"""ddtree-convert: an HF target (+ DFlash drafter) directory -> a converted orbax directory.

  ddtree-convert --hf_dir=/models/Kimi-K2.6 --drafter_dir=/models/Kimi-K2.6-DFlash \\
      --out_dir=/models/k26-ddtree --mesh=expert=8 --dtype=bfloat16

Checks every shard header first, then converts one decoder layer at a time (host memory ~ one shard),
into <out_dir>.tmp-<pid>, renamed to out_dir at the end: a failure leaves no output directory.
"""
from __future__ import annotations

import logging
import sys

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("hf_dir", None, "Hugging Face target directory (config.json + safetensors shards).")
flags.DEFINE_string("drafter_dir", None, "Optional DFlash drafter directory, checked against the target.")
flags.DEFINE_string("out_dir", None, "Output directory (must not exist unless --overwrite).")
flags.DEFINE_string("mesh", "", "Device mesh for the saved shardings, e.g. 'expert=8' or 'data=1,expert=8'; "
                    "empty: one device.")
flags.DEFINE_string("dtype", "bfloat16", "Dtype of the non-quantized parameters: bfloat16 or float32.")
flags.DEFINE_bool("overwrite", False, "Replace an existing out_dir.")
flags.DEFINE_bool("progress", True, "Show a progress bar.")


class UsageError(ValueError):
  pass


def parse_mesh(spec: str):
  """'a=2,b=4' -> Mesh over the first 8 devices with axes ('a', 'b'); '' -> None."""
  import jax
  import numpy as np
  from jax.sharding import Mesh
  if not spec:
    return None
  names, sizes = [], []
  for part in spec.split(","):
    name, _, size = part.partition("=")
    if not name or not size.isdigit() or int(size) < 1:
      raise UsageError(f"--mesh={spec!r}: expected comma-separated name=size, e.g. 'expert=8'")
    names.append(name.strip())
    sizes.append(int(size))
  n = int(np.prod(sizes))
  if n > jax.device_count():
    raise UsageError(f"--mesh={spec!r} needs {n} devices, {jax.device_count()} available")
  return Mesh(np.array(jax.devices()[:n]).reshape(sizes), tuple(names))


def main(argv):
  del argv
  from ddtree_jax.checkpoint import CheckpointError
  from ddtree_jax.checkpoint.convert import convert_checkpoint
  from ddtree_jax.config import ConfigError
  from ddtree_jax.cli.common import parse_dtype, UsageError as CommonUsageError
  logging.getLogger("ddtree_jax.checkpoint").setLevel(logging.INFO)
  try:
    for f in ("hf_dir", "out_dir"):
      if not getattr(FLAGS, f):
        raise UsageError(f"--{f} is required")
    dtype = parse_dtype(FLAGS.dtype)
    mesh = parse_mesh(FLAGS.mesh)
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
  except (UsageError, CommonUsageError, CheckpointError, ConfigError) as e:
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
