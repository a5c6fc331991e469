"""HF target (+ DFlash drafter) directory -> converted orbax directory (see orbax_io for the layout).

Everything checkable from the shard headers is checked before anything is written; the output is
written into `<out_dir>.tmp-<pid>` next to out_dir and renamed at the end, so a failure (or Ctrl-C)
leaves no output directory. Host memory: one group (one decoder layer) at a time.

On a ("data", "model") mesh the arrays are saved in the partition rules of ddtree_jax/sharding.py (what
`load_target(..., mesh=...)` restores them into); other meshes get `load.basic_shardings`. Several
`jax.distributed` processes (the same call in each, a mesh over all their devices, out_dir on a
filesystem they all see): every process reads the shards and saves its own devices' slices through orbax;
process 0 alone writes the small files and the manifest and renames the directory (pid of process 0).
"""
from __future__ import annotations

import logging
import os
import shutil
import time
from typing import Any, Callable, Optional

import jax.numpy as jnp
from jax.sharding import Mesh

from ddtree_jax import processes
from ddtree_jax.checkpoint import load as load_lib
from ddtree_jax.checkpoint import orbax_io
from ddtree_jax.checkpoint.drafter_names import DrafterReader
from ddtree_jax.checkpoint.safetensors_reader import CheckpointError

log = logging.getLogger("ddtree_jax.checkpoint")

# Small non-weight files carried over into the converted directory (plus tokenizer* and chat_template*).
AUX_FILES = ("tiktoken.model", "generation_config.json", "special_tokens_map.json")


def convert_checkpoint(hf_dir: str, out_dir: str, *, drafter_dir: Optional[str] = None, dtype=jnp.bfloat16,
                       mesh: Optional[Mesh] = None, shardings: load_lib.Shardings = None, overwrite: bool = False,
                       progress: Any = None, on_group: Optional[Callable[[str], None]] = None) -> dict[str, Any]:
  """Converts; returns the manifest. `progress`: an object with `update(nbytes)` (e.g. a tqdm bar) or None."""
  out_dir = os.path.abspath(out_dir)
  if os.path.exists(out_dir) and not overwrite:
    raise CheckpointError(f"{out_dir}: already exists (pass --overwrite to replace it)")
  t0 = time.time()
  reader = load_lib.TargetReader(hf_dir)                 # all header checks happen here
  cfg = reader.cfg
  dreader = DrafterReader(drafter_dir, cfg) if drafter_dir else None
  drafter_shardings = shardings
  if shardings is None and mesh is not None:
    shardings = load_lib.mesh_shardings(mesh, cfg)
    drafter_shardings = load_lib.mesh_shardings(mesh, dreader.cfg, drafter=True) if dreader else None
  primary, sync = processes.is_primary(), processes.barrier
  total = reader.tensor_bytes() + (dreader.tensor_bytes() if dreader else 0)
  if progress is not None and hasattr(progress, "reset"):
    progress.reset(total=total)
  tick = (lambda n: progress.update(n)) if progress is not None else None

  parent = os.path.dirname(out_dir)
  tmp = f"{out_dir}.tmp-{processes.from_process_0(os.getpid())}"   # one directory shared by all processes
  sync("convert:checked")           # every process has checked out_dir before process 0 writes anything
  try:
    if primary:
      os.makedirs(parent, exist_ok=True)
      if os.path.exists(tmp):
        shutil.rmtree(tmp)
      os.makedirs(os.path.join(tmp, "target"))
      shutil.copyfile(reader.ckpt.config_path, os.path.join(tmp, "config.json"))
      for name in sorted(os.listdir(reader.ckpt.path)):     # tokenizer, generation config, chat template
        if name in AUX_FILES or name.startswith("tokenizer") or name.startswith("chat_template"):
          src = os.path.join(reader.ckpt.path, name)
          if os.path.isfile(src) and name != "config.json":
            shutil.copyfile(src, os.path.join(tmp, name))
    sync("convert:tmp")
    shapes = load_lib.param_shapes(load_lib.abstract_target(cfg, dtype))
    groups: dict[str, list[str]] = {}
    place = lambda k, a: load_lib.put(a, load_lib.sharding_for(shardings, k, a.shape, a.dtype))
    for gname, arrays in reader.iter_groups({k: v.dtype for k, v in shapes.items()}, tick, place):
      orbax_io.save_tree(os.path.join(tmp, "target", gname), arrays)
      groups[gname] = list(arrays)
      arrays.clear()              # the reader's generator shares this dict: free the group now
      if on_group:
        on_group(gname)
    manifest: dict[str, Any] = {
        "dtype": jnp.dtype(dtype).name,
        "mesh": dict(mesh.shape) if mesh is not None else None,
        "source": {"hf_dir": os.path.abspath(hf_dir), "drafter_dir": os.path.abspath(drafter_dir) if drafter_dir else None},
        "skipped": reader.skipped.line(),
        "target": {"groups": groups},
        "drafter": None,
    }
    if dreader is not None:
      if primary:
        shutil.copyfile(dreader.ckpt.config_path, os.path.join(tmp, "drafter_config.json"))
      arrays, params = {}, {}
      for k, a in dreader.iter_params(dtype, tick):
        arrays[k] = load_lib.put(a, load_lib.sharding_for(drafter_shardings, k, a.shape, a.dtype))
        params[k] = [list(a.shape), a.dtype.name]
        del a
      orbax_io.save_tree(os.path.join(tmp, "drafter"), arrays)
      del arrays
      manifest["drafter"] = {"params": params}
    if primary:
      orbax_io.write_manifest(tmp, manifest)
      if os.path.exists(out_dir):               # --overwrite: swap, then delete the old one
        old = f"{out_dir}.old-{os.getpid()}"
        os.rename(out_dir, old)
        os.rename(tmp, out_dir)
        shutil.rmtree(old, ignore_errors=True)
      else:
        os.rename(tmp, out_dir)
    sync("convert:done")              # out_dir exists when any process returns
  except BaseException:
    # Only process 0 owns the shared temporary directory: another process that fails must not delete it
    # under process 0's writes (process 0 then fails at the next barrier and removes it itself).
    if primary:
      shutil.rmtree(tmp, ignore_errors=True)
    raise
  log.info("converted %s -> %s in %.1f s (%s)", hf_dir, out_dir, time.time() - t0, manifest["skipped"])
  return manifest
