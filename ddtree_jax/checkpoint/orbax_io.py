"""Converted checkpoints: orbax-checkpoint trees that restore straight onto a device mesh.

Directory layout (written by `convert.convert_checkpoint` / `ddtree-convert`):
  ddtree_checkpoint.json   marker + manifest: format version, dtype, parameter groups, drafter params
  config.json              the target's HF config.json, verbatim
  target/<group>/          one orbax checkpoint per group ("embed_tokens", "layers.{i}", "norm", "lm_head"),
                           so that saving and restoring hold one group of host memory at a time
  drafter_config.json      (optional) the drafter's HF config.json, verbatim
  drafter/                 (optional) one orbax checkpoint of the drafter's parameters
Arrays are saved with their shardings (orbax records them); restore takes a `shardings` argument
({param path: Sharding} or a rule (path, shape, dtype) -> Sharding) so a checkpoint written on one mesh
can be restored onto another.
"""
from __future__ import annotations

import json
import os
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp

from ddtree_jax.checkpoint.safetensors_reader import CheckpointError

MARKER = "ddtree_checkpoint.json"
FORMAT = "ddtree-jax/orbax"
VERSION = 1


def is_converted(path: str) -> bool:
  return os.path.isfile(os.path.join(path, MARKER))


def read_manifest(path: str) -> dict[str, Any]:
  f = os.path.join(path, MARKER)
  try:
    with open(f) as fh:
      m = json.load(fh)
  except (OSError, json.JSONDecodeError) as e:
    raise CheckpointError(f"{f}: cannot read the converted-checkpoint manifest ({e})") from None
  if m.get("format") != FORMAT or m.get("version") != VERSION:
    raise CheckpointError(f"{f}: format {m.get('format')!r} version {m.get('version')!r}; "
                          f"expected {FORMAT!r} version {VERSION}")
  return m


def write_manifest(path: str, manifest: Mapping[str, Any]):
  m = {"format": FORMAT, "version": VERSION, **manifest}
  with open(os.path.join(path, MARKER), "w") as f:
    json.dump(m, f, indent=2)


def _nest(flat: Mapping[str, Any]) -> dict:
  out: dict = {}
  for path, v in flat.items():
    node = out
    *head, last = path.split(".")
    for k in head:
      node = node.setdefault(k, {})
    node[last] = v
  return out


def _flatten(tree: Mapping, prefix: str = "") -> dict[str, Any]:
  out = {}
  for k, v in tree.items():
    key = f"{prefix}{k}"
    if isinstance(v, Mapping):
      out.update(_flatten(v, key + "."))
    else:
      out[key] = v
  return out


def save_tree(directory: str, arrays: Mapping[str, jax.Array]):
  """Saves {param path: jax.Array} (with their shardings) as one orbax checkpoint; blocks until written."""
  ckptr = ocp.Checkpointer(ocp.StandardCheckpointHandler())   # synchronous: no second in-flight copy
  try:
    ckptr.save(os.path.abspath(directory), args=ocp.args.StandardSave(_nest(arrays)))
  finally:
    ckptr.close()


def restore_tree(directory: str, abstract: Mapping[str, jax.ShapeDtypeStruct], shardings=None) -> dict[str, jax.Array]:
  """Restores {param path: jax.Array}; `abstract` gives shapes and (target) dtypes, `shardings` placements."""
  from ddtree_jax.checkpoint.load import sharding_for
  default = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  target = {}
  for k, s in abstract.items():
    sh = sharding_for(shardings, k, s.shape, s.dtype) or default
    target[k] = jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh)
  ckptr = ocp.StandardCheckpointer()
  try:
    restored = ckptr.restore(os.path.abspath(directory), _nest(target))
  except Exception as e:  # orbax raises many kinds; name the directory
    raise CheckpointError(f"{directory}: cannot restore orbax checkpoint ({type(e).__name__}: {e})") from e
  finally:
    ckptr.close()
  out = _flatten(restored)
  missing = sorted(set(abstract) - set(out))
  if missing:
    raise CheckpointError(f"{directory}: missing parameters {missing[:5]}")
  return out


def restore_target(path: str, dtype=jnp.bfloat16, shardings=None):
  """A converted directory -> (DeepseekV3, ModelConfig), group by group."""
  from flax import nnx
  from ddtree_jax.checkpoint import load as load_lib
  from ddtree_jax.config import ConfigError, load_config
  from ddtree_jax.model.deepseek import DeepseekV3
  m = read_manifest(path)
  try:
    cfg = load_config(os.path.join(path, "config.json"))
  except ConfigError as e:
    raise CheckpointError(str(e)) from None
  shapes = load_lib.param_shapes(load_lib.abstract_target(cfg, dtype))
  arrays = {}
  for gname, paths in m["target"]["groups"].items():
    unknown = [p for p in paths if p not in shapes]
    if unknown:
      raise CheckpointError(f"{path}: group '{gname}' holds parameters the model does not have: {unknown[:5]}")
    arrays.update(restore_tree(os.path.join(path, "target", gname), {p: shapes[p] for p in paths}, shardings))
  model = load_lib.build_module(lambda: DeepseekV3(cfg, dtype=dtype, rngs=nnx.Rngs(0)), arrays)
  return model, cfg


def restore_drafter(path: str, dtype=jnp.bfloat16, shardings=None):
  """A converted directory with a drafter -> ({param path: jax.Array}, DrafterConfig)."""
  from ddtree_jax.checkpoint.drafter_config import load_drafter_config
  from ddtree_jax.config import ConfigError
  m = read_manifest(path)
  if not m.get("drafter"):
    raise CheckpointError(f"{path}: this converted checkpoint has no drafter (convert with --drafter_dir)")
  try:
    dcfg = load_drafter_config(os.path.join(path, "drafter_config.json"))
  except ConfigError as e:
    raise CheckpointError(str(e)) from None
  abstract = {k: jax.ShapeDtypeStruct(tuple(shape), jnp.dtype(dtype)) for k, (shape, _) in m["drafter"]["params"].items()}
  return restore_tree(os.path.join(path, "drafter"), abstract, shardings), dcfg
