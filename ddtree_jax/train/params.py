"""Flat parameter dicts for training: {param path: array}, the paths of `checkpoint.target_names`
(e.g. `layers.1.self_attn.q_a_proj.kernel`). Training keeps fp32 masters in such a dict and rebuilds
the NNX module (parameters cast to the module's dtypes) inside the jitted step."""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
from flax import nnx
from flax.nnx import traversals


def _key(path) -> str:
  return ".".join(str(p) for p in path)


def flat_params(module: nnx.Module) -> dict[str, jax.Array]:
  pure = nnx.to_pure_dict(nnx.state(module, nnx.Param))
  return {_key(k): v for k, v in traversals.flatten_mapping(pure).items()}


class ModuleTemplate:
  """Rebuilds `make()` from a flat dict of parameters (traceable: usable inside jit / grad)."""

  def __init__(self, make: Callable[[], nnx.Module]):
    self.make = make
    abstract = nnx.eval_shape(make)
    self.graphdef, self._params, _ = nnx.split(abstract, nnx.Param, ...)
    self.rest = jax.jit(lambda: nnx.split(make(), nnx.Param, ...)[2])()
    pure = nnx.to_pure_dict(self._params)
    self.shapes = {_key(k): jax.ShapeDtypeStruct(v.shape, v.dtype) for k, v in traversals.flatten_mapping(pure).items()}
    self._keys = {_key(k): k for k in traversals.flatten_mapping(pure)}

  def init(self, seed: int, dtype=jnp.float32) -> dict[str, jax.Array]:
    """Freshly initialised parameters (floating ones in `dtype`, the others as the module has them)."""
    flat = jax.jit(lambda: flat_params(self.make()))()
    del seed  # the module's own Rngs decide the init
    return {k: (v.astype(dtype) if jnp.issubdtype(v.dtype, jnp.floating) else v) for k, v in flat.items()}

  def cast(self, flat: dict[str, jax.Array]) -> dict[str, jax.Array]:
    return {k: flat[k].astype(s.dtype) for k, s in self.shapes.items()}

  def merge(self, flat: dict[str, jax.Array]) -> nnx.Module:
    missing = sorted(set(self.shapes) - set(flat))
    if missing:
      raise KeyError(f"parameters missing: {missing[:5]}")
    params = jax.tree.map(lambda x: x, self._params)
    nested = traversals.unflatten_mapping({self._keys[k]: v for k, v in self.cast(flat).items()})
    nnx.replace_by_pure_dict(params, nested)
    return nnx.merge(self.graphdef, params, self.rest)
