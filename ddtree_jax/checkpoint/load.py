"""Loading the target (and the drafter's weights) from an HF directory or a converted orbax directory.

Host memory stays bounded: tensors are read one at a time and assembled one *group* at a time
(the embedding, one decoder layer, the final norm, the lm_head); each group is placed on the devices
(`jax.Array`s with the requested shardings) before the next is read. For Kimi K2.6 a layer group
(~9.5 GB of INT4 experts) is about the size of one published shard.

Everything that can be checked from the shard headers (missing / unknown tensors, shapes, dtypes,
truncated files, index entries) is checked before any tensor is read.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any, Callable, Iterator, Mapping, Optional, Union

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from flax.nnx import traversals
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from ddtree_jax.checkpoint.safetensors_reader import CheckpointError, SafetensorsDir
from ddtree_jax.checkpoint import target_names
from ddtree_jax.checkpoint.target_names import ParamSpec
from ddtree_jax.config import ConfigError, ModelConfig, config_from_hf_dict

log = logging.getLogger("ddtree_jax.checkpoint")

# {param path: Sharding}, or a function (path, shape, dtype) -> Sharding, or None (one device).
Shardings = Union[None, Mapping[str, jax.sharding.Sharding], Callable[[str, tuple, Any], jax.sharding.Sharding]]


# ---- shardings ---------------------------------------------------------------------------------

def basic_shardings(mesh: Mesh, expert_axis: Optional[str] = None):
  """A stand-in until `ddtree_jax.sharding` has the real rules: routed experts split on their leading
  expert axis over `expert_axis` (default: the mesh's "expert" axis, else its first axis) when it
  divides; everything else replicated."""
  axis = expert_axis or ("expert" if "expert" in mesh.axis_names else mesh.axis_names[0])
  n = mesh.shape[axis]

  def rule(path: str, shape: tuple, dtype) -> jax.sharding.Sharding:
    del dtype
    if ".experts." in path and shape and shape[0] % n == 0:
      return NamedSharding(mesh, P(axis, *([None] * (len(shape) - 1))))
    return NamedSharding(mesh, P())
  return rule


def mesh_shardings(mesh: Mesh, cfg=None, *, drafter: bool = False):
  """The default placement on `mesh`: the partition rules of `ddtree_jax.sharding` on a ("data", "model")
  mesh (cfg: the target's ModelConfig or the drafter's DFlashConfig, for the head / expert / vocabulary
  divisibility checks), else `basic_shardings`."""
  from ddtree_jax import sharding
  if sharding.MODEL not in mesh.axis_names:
    return basic_shardings(mesh)
  return sharding.drafter_rule(mesh, cfg) if drafter else sharding.target_rule(mesh, cfg)


def sharding_for(shardings: Shardings, path: str, shape: tuple, dtype) -> Optional[jax.sharding.Sharding]:
  if shardings is None:
    return None
  if callable(shardings):
    return shardings(path, tuple(shape), dtype)
  if path not in shardings:
    raise KeyError(f"shardings: no sharding given for parameter '{path}'")
  return shardings[path]


def put(x: np.ndarray, sharding: Optional[jax.sharding.Sharding]) -> jax.Array:
  """Host array -> jax.Array; with a sharding each device receives only its slice (multi-host safe)."""
  if sharding is None:
    return jax.device_put(x)
  return jax.make_array_from_callback(x.shape, sharding, lambda idx: x[idx])


# ---- the abstract model ------------------------------------------------------------------------

def _path_str(path: tuple) -> str:
  return ".".join(str(p) for p in path)


def abstract_target(cfg: ModelConfig, dtype) -> nnx.Module:
  from ddtree_jax.model.deepseek import DeepseekV3
  return nnx.eval_shape(lambda: DeepseekV3(cfg, dtype=dtype, rngs=nnx.Rngs(0)))


def param_shapes(model: nnx.Module) -> dict[str, jax.ShapeDtypeStruct]:
  """{param path: ShapeDtypeStruct} of an (abstract or concrete) module's nnx.Params."""
  params = nnx.state(model, nnx.Param)
  flat = traversals.flatten_mapping(nnx.to_pure_dict(params))
  return {_path_str(k): jax.ShapeDtypeStruct(v.shape, v.dtype) for k, v in flat.items()}


def build_module(make: Callable[[], nnx.Module], arrays: Mapping[str, jax.Array]) -> nnx.Module:
  """Builds `make()` without initialising its parameters: the nnx.Params come from `arrays`
  ({path: array}, shapes and dtypes checked), everything else (e.g. RoPE tables) is computed."""
  abstract = nnx.eval_shape(make)
  graphdef, params, rest = nnx.split(abstract, nnx.Param, ...)
  # Non-parameter state (constants) computed under jit: the unused parameter init is dead code.
  rest = jax.jit(lambda: nnx.split(make(), nnx.Param, ...)[2])()
  flat = traversals.flatten_mapping(nnx.to_pure_dict(params))
  want = {_path_str(k): k for k in flat}
  missing = sorted(set(want) - set(arrays))
  extra = sorted(set(arrays) - set(want))
  if missing or extra:
    raise CheckpointError(f"parameters do not match the model: missing {missing[:5]}{'...' if len(missing) > 5 else ''}, "
                          f"unexpected {extra[:5]}{'...' if len(extra) > 5 else ''}")
  new = {}
  for key, k in want.items():
    a, ref = arrays[key], flat[k]
    if tuple(a.shape) != tuple(ref.shape) or a.dtype != ref.dtype:
      raise CheckpointError(f"parameter '{key}': got {a.dtype}{list(a.shape)}, the model needs {ref.dtype}{list(ref.shape)}")
    new[k] = a
  nnx.replace_by_pure_dict(params, traversals.unflatten_mapping(new))
  return nnx.merge(graphdef, params, rest)


# ---- HF target reading ---------------------------------------------------------------------------

@dataclasses.dataclass
class SkipSummary:
  counts: dict[str, int] = dataclasses.field(default_factory=dict)
  nbytes: dict[str, int] = dataclasses.field(default_factory=dict)

  def add(self, reason: str, n: int):
    self.counts[reason] = self.counts.get(reason, 0) + 1
    self.nbytes[reason] = self.nbytes.get(reason, 0) + n

  def line(self) -> str:
    if not self.counts:
      return "skipped no tensors"
    label = {"vision": "vision tower/projector", "mtp": "MTP layers", "rotary": "rotary buffers"}
    parts = [f"{label.get(r, r)} {self.counts[r]} tensors ({self.nbytes[r] / 2**20:.1f} MiB)" for r in sorted(self.counts)]
    return "skipped " + ", ".join(parts)


class TargetReader:
  """An HF target checkpoint checked against the model it will fill; reads one group at a time."""

  def __init__(self, hf_dir: str, cfg: Optional[ModelConfig] = None):
    self.ckpt = SafetensorsDir(hf_dir)
    try:
      self.cfg = cfg or config_from_hf_dict(self.ckpt.config, where=self.ckpt.config_path)
    except ConfigError as e:
      raise CheckpointError(str(e)) from None
    self.specs = target_names.target_param_specs(self.cfg)
    self.groups = target_names.groups(self.specs)
    self.skipped = self._validate()

  def _where(self, name: str) -> str:
    return os.path.basename(self.ckpt.tensors[name].file)

  def _validate(self) -> SkipSummary:
    ck, cfg = self.ckpt, self.cfg
    known = target_names.hf_to_param(self.specs)
    skipped = SkipSummary()
    for name, info in ck.tensors.items():
      if name in known:
        continue
      reason = target_names.skip_reason(name, cfg, ck.config)
      if reason is None:
        hint = ""
        other = "model." if cfg.tensor_prefix != "model." else "language_model.model."
        if name.startswith(other):
          hint = f" (its prefix '{other}' does not match config.json, which implies '{cfg.tensor_prefix}')"
        elif ".experts." in name and (name.endswith(".weight") != (not cfg.experts_int4)):
          hint = (" (expert storage does not match config.json: "
                  + ("quantization_config says INT4 weight_packed/weight_scale" if cfg.experts_int4
                     else "no quantization_config, so bf16 .weight experts are expected") + ")")
        raise CheckpointError(f"{info.file}: unknown tensor '{name}' {info.dtype}{list(info.shape)} "
                              f"does not belong to a {cfg.num_hidden_layers}-layer DeepSeek-V3 target{hint}")
      skipped.add(reason, info.nbytes)
    for spec in self.specs:
      for src in spec.sources + spec.checks:
        info = ck.tensors.get(src.name)
        if info is None:
          raise CheckpointError(f"{ck.path}: missing tensor '{src.name}' (for parameter '{spec.path}'); "
                                f"no shard contains it")
        if info.shape != src.shape:
          raise CheckpointError(f"{info.file}: tensor '{src.name}' has shape {list(info.shape)}, "
                                f"expected {list(src.shape)} from config.json")
        if info.dtype not in src.dtypes:
          raise CheckpointError(f"{info.file}: tensor '{src.name}' has dtype {info.dtype}, "
                                f"expected one of {list(src.dtypes)}")
    log.info("%s: %s", ck.path, skipped.line())
    return skipped

  def tensor_count(self) -> int:
    return sum(len(s.sources) + len(s.checks) for s in self.specs)

  def tensor_bytes(self) -> int:
    return sum(self.ckpt.tensors[src.name].nbytes for s in self.specs for src in s.sources + s.checks)

  def read_spec(self, spec: ParamSpec, dtype, on_tensor: Optional[Callable[[int], None]] = None) -> np.ndarray:
    """Reads one parameter as a host array of `dtype` (stacked experts: one tensor at a time)."""
    dtype = np.dtype(dtype)
    for src in spec.checks:
      v = self.ckpt.read(src.name)
      if tuple(int(x) for x in v.reshape(-1)) != src.value:
        raise CheckpointError(f"{self.ckpt.tensors[src.name].file}: tensor '{src.name}' = {v.tolist()}, "
                              f"expected {list(src.value)} (the [out, in] of the unpacked weight)")
      if on_tensor:
        on_tensor(v.nbytes)
    if spec.stacked:
      out = np.empty(spec.shape, dtype)
      for e, src in enumerate(spec.sources):
        a = self.ckpt.read(src.name)
        out[e] = a.T if spec.transpose else a
        if on_tensor:
          on_tensor(a.nbytes)
        del a
      return out
    a = self.ckpt.read(spec.sources[0].name)
    if on_tensor:
      on_tensor(a.nbytes)
    return np.ascontiguousarray(a.T if spec.transpose else a, dtype=dtype)

  def iter_groups(self, dtypes: Mapping[str, Any], on_tensor=None, place=None) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yields (group name, {param path: array}) one group at a time; `dtypes`: {path: dtype}.

    `place(path, host_array) -> jax.Array` is applied to each parameter as soon as it is read, so that
    at most one parameter is held twice (host + device); without it the group's host arrays are yielded."""
    for gname, specs in self.groups.items():
      out = {}
      for s in specs:
        a = self.read_spec(s, dtypes[s.path], on_tensor)
        out[s.path] = place(s.path, a) if place is not None else a
        del a
      yield gname, out
      del out
      release_host_memory()


def release_host_memory():
  """Returns freed heap pages to the OS (glibc keeps them otherwise, which inflates RSS group after group)."""
  import ctypes
  import gc
  gc.collect()
  try:
    ctypes.CDLL("libc.so.6").malloc_trim(0)
  except (OSError, AttributeError):
    pass


def _is_orbax_dir(path: str) -> bool:
  from ddtree_jax.checkpoint import orbax_io
  return orbax_io.is_converted(path)


def load_target(path: str, dtype=jnp.bfloat16, mesh: Optional[Mesh] = None, *, shardings: Shardings = None,
                on_tensor: Optional[Callable[[int], None]] = None):
  """Builds a DeepseekV3 with the weights of an HF directory or a converted (`ddtree-convert`) directory.

  Returns (model, cfg). `shardings` ({path: Sharding} or a rule (path, shape, dtype) -> Sharding)
  places each parameter; with only `mesh` given, `mesh_shardings(mesh, cfg)` (the rules of
  ddtree_jax.sharding) is used; with neither, the default device. Each device receives only its shards.
  Host memory: one group (one layer) at a time.
  """
  from ddtree_jax.model.deepseek import DeepseekV3
  if _is_orbax_dir(path):
    from ddtree_jax.checkpoint import orbax_io
    if shardings is None and mesh is not None:
      from ddtree_jax.config import load_config
      shardings = mesh_shardings(mesh, load_config(os.path.join(path, "config.json")))
    return orbax_io.restore_target(path, dtype=dtype, shardings=shardings)
  reader = TargetReader(path)
  cfg = reader.cfg
  if shardings is None and mesh is not None:
    shardings = mesh_shardings(mesh, cfg)
  shapes = param_shapes(abstract_target(cfg, dtype))
  arrays: dict[str, jax.Array] = {}
  place = lambda k, a: put(a, sharding_for(shardings, k, a.shape, a.dtype))
  for _, group in reader.iter_groups({k: v.dtype for k, v in shapes.items()}, on_tensor, place):
    arrays.update(group)
    del group
  model = build_module(lambda: DeepseekV3(cfg, dtype=dtype, rngs=nnx.Rngs(0)), arrays)
  return model, cfg


def load_drafter(path: str, target_cfg: Optional[ModelConfig] = None, dtype=jnp.bfloat16, *,
                 shardings: Shardings = None, mesh: Optional[Mesh] = None):
  """Reads a DFlash drafter (HF directory or converted directory) -> ({param path: jax.Array}, DrafterConfig).

  Checked against `target_cfg` when given (hidden size, vocabulary, target layer ids)."""
  from ddtree_jax.checkpoint import drafter_names, orbax_io
  if orbax_io.is_converted(path):
    if shardings is None and mesh is not None:
      from ddtree_jax.checkpoint.drafter_config import load_drafter_config
      shardings = mesh_shardings(mesh, load_drafter_config(os.path.join(path, "drafter_config.json")), drafter=True)
    params, dcfg = orbax_io.restore_drafter(path, dtype=dtype, shardings=shardings)
    if target_cfg is not None:
      dcfg = dcfg.check_against(target_cfg, where=path)
    return params, dcfg
  reader = drafter_names.DrafterReader(path, target_cfg)
  if shardings is None and mesh is not None:
    shardings = mesh_shardings(mesh, reader.cfg, drafter=True)
  out = {}
  for k, a in reader.iter_params(dtype):
    out[k] = put(a, sharding_for(shardings, k, a.shape, a.dtype))
  return out, reader.cfg
