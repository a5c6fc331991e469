"""ddtree-plan: will it fit? Bytes per device of weights, caches and activations for a config on a mesh.

  ddtree-plan --config=kimi_k2_6 --mesh=1x8 --device_memory_gb=141 --context=32K
  ddtree-plan --config=/path/to/Kimi-K2.6 --drafter=/path/to/drafter --mesh=1x8 --device_memory_gb=96 --context=128K

Exits 0 when the plan fits, 1 when it does not (with what to change), 2 on bad flags. Needs no devices.
"""
from __future__ import annotations

import os
import re
import sys

from absl import app, flags

from ddtree_jax.cli import common  # noqa: F401  (--prefill_chunk)
from ddtree_jax.cli import distributed  # noqa: F401  (--mesh; the jax.distributed flags are accepted and unused)

FLAGS = flags.FLAGS
flags.DEFINE_string("config", "kimi_k2_6", "preset name in configs/ (kimi_k2_6, tiny) or an HF config dir / config.json")
flags.DEFINE_string("drafter", "auto", "drafter: 'auto' (the K2.5/K2.6 DFlash drafter shape for kimi_k2_6, none "
                    "otherwise), 'none', or an HF drafter config dir / config.json")
flags.DEFINE_string("context", "32K", "cache capacity per sequence in tokens (suffix K = 1024)")
flags.DEFINE_integer("batch", 1, "sequences decoded together")
flags.DEFINE_integer("budget", 32, "DDTree node budget per round (0 = AR)")
flags.DEFINE_string("prompt_len", "4K", "prompt tokens, prefilled in forwards of --prefill_chunk tokens "
                    "(suffix K = 1024)")
flags.DEFINE_float("device_memory_gb", None, "memory per device in GB (1e9 bytes), e.g. 141 (H200), 96 (RTX PRO 6000)")
flags.DEFINE_float("reserve_gb", 2.0, "kept free per device for XLA workspace and the runtime")
flags.DEFINE_enum("dtype", "bfloat16", ["bfloat16", "float32"], "parameter and cache dtype")
flags.DEFINE_enum("attention", "pallas", ["pallas", "xla"], "attention implementation (xla materialises scores)")
flags.DEFINE_enum("moe", "pallas", ["pallas", "xla"], "MoE implementation (xla materialises dequantised experts)")


def parse_tokens(text: str, flag: str) -> int:
  m = re.fullmatch(r"\s*(\d+)\s*([kK]?)\s*", str(text))
  if not m:
    raise ValueError(f"--{flag}={text!r}: expected a token count like 32768 or 32K")
  return int(m.group(1)) * (1024 if m.group(2) else 1)


def load_target_config(name: str):
  import importlib
  from ddtree_jax.config import load_config
  if os.path.exists(name):
    return load_config(name), False
  try:
    mod = importlib.import_module(f"configs.{name}")
  except ImportError:
    raise ValueError(f"--config={name!r}: neither a preset in configs/ nor an existing path") from None
  return mod.get_config(), name.startswith("kimi")


def load_drafter_cfg(spec: str, target, is_kimi: bool):
  if spec == "none" or (spec == "auto" and not is_kimi):
    return None
  if spec == "auto":
    from ddtree_jax.plan import k26_drafter
    return k26_drafter(target)
  from ddtree_jax.checkpoint.drafter_config import load_drafter_config
  path = os.path.join(spec, "config.json") if os.path.isdir(spec) else spec
  return load_drafter_config(path, target)


def main(argv):
  del argv
  from ddtree_jax import plan, sharding
  try:
    cfg, is_kimi = load_target_config(FLAGS.config)
    dcfg = load_drafter_cfg(FLAGS.drafter, cfg, is_kimi)
    dims = [int(x) for x in re.findall(r"\d+", FLAGS.mesh or "1x8")]
    mesh = sharding.parse_mesh(FLAGS.mesh or "1x8", dims[0] * dims[-1] if dims else 0)   # no devices needed
    context = parse_tokens(FLAGS.context, "context")
    prompt = min(parse_tokens(FLAGS.prompt_len, "prompt_len"), context)
    if FLAGS.batch < 1 or FLAGS.budget < 0:
      raise ValueError("--batch must be >= 1 and --budget >= 0")
    prefill_chunk = common.parse_prefill_chunk(FLAGS.prefill_chunk)
  except ValueError as e:
    print(f"ddtree-plan: error: {e}", file=sys.stderr)
    return 2
  kw = dict(dcfg=dcfg, dtype_bytes=2 if FLAGS.dtype == "bfloat16" else 4, attention=FLAGS.attention, moe=FLAGS.moe)
  dev = int(FLAGS.device_memory_gb * plan.GB) if FLAGS.device_memory_gb else None
  p = plan.make_plan(cfg, mesh, context=context, batch=FLAGS.batch, budget=FLAGS.budget, prompt_len=prompt,
                     prefill_chunk=prefill_chunk,
                     device_bytes=dev, reserve=int(FLAGS.reserve_gb * plan.GB), **kw)
  label = FLAGS.config + (f" + drafter ({dcfg.num_hidden_layers} layers)" if dcfg is not None else "")
  print(f"ddtree-plan: {label}")
  print("\n".join(p.lines()))
  if not p.fits:
    print("ddtree-plan: " + plan.advice(p, cfg, **kw), file=sys.stderr)
    return 1
  return 0


def run():
  app.run(lambda argv: sys.exit(main(argv)))


if __name__ == "__main__":
  run()
