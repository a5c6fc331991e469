"""Data-parallel training on a ("data", "model") mesh, for both trainers.

The batch [B, ...] is split over "data" (B must divide by its size); parameters and the optimizer state
follow the partition rules of `ddtree_jax.sharding` (`train_state_shardings`: replicated on a DATAx1
mesh, split by head / expert / vocabulary over "model" otherwise); one jitted step whose outputs keep
those shardings, so XLA's partitioner inserts the gradient all-reduce over "data". The step computes
the one-device function (the same global-batch mean loss, the same MoE capacity over the whole batch),
only partitioned. mesh=None everywhere: the plain one-device program.

Several processes (jax.distributed): every process runs the same steps on the same host batches (the
same seeds), each placing its own devices' shards; process 0 alone writes the outputs other than the
orbax checkpoints (`is_writer`), and host-side decisions that depend on time are taken by process 0
(`from_process_0`).
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from ddtree_jax import sharding
from ddtree_jax.processes import from_process_0, is_primary as is_writer  # noqa: F401  (the trainers' names)


def check_batch(batch: int, mesh: Optional[Mesh], name: str = "batch", hint: str = "") -> None:
  """Raises ValueError unless `batch` splits evenly over the mesh's "data" axis (`hint` ends the message)."""
  d = sharding.data_size(mesh)
  if batch < 1 or batch % d:
    m = sharding.model_size(mesh)
    raise ValueError(f"{name}={batch}{hint}: the training batch must split evenly over the data axis of the mesh "
                     f"{d}x{m} (--mesh=DATAxMODEL): use a multiple of {d}, or a --mesh with fewer data groups")


def place_state(state: dict, mesh: Optional[Mesh], rules, cfg) -> tuple[dict, Any]:
  """{"params", "opt"} -> (the state on the mesh, its shardings); (state, None) without a mesh.
  rules: sharding.TARGET_RULES or DRAFTER_RULES; cfg: the config their divisibility refers to."""
  if mesh is None:
    return state, None
  shardings = sharding.train_state_shardings(state, mesh, sharding.param_rule(mesh, cfg, rules))
  return jax.tree.map(sharding.put_global, state, shardings), shardings


def place_params(params: dict, mesh: Optional[Mesh], rules, cfg) -> dict:
  """Flat parameters {path: array} (host or device) -> on the mesh by the rules (device arrays without one)."""
  if mesh is None:
    return {k: jnp.asarray(v) for k, v in params.items()}
  return place_state({"params": params}, mesh, rules, cfg)[0]["params"]


def place_batch(x, mesh: Optional[Mesh]) -> jax.Array:
  """A host batch [B, ...] (the same on every process) -> split over "data" (replicated when B does not
  divide, e.g. an evaluation tail)."""
  x = np.asarray(x)
  if mesh is None:
    return jnp.asarray(x)
  return sharding.put_global(x, sharding.batch_sharding(mesh, x.shape))


def place_replicated(x, mesh: Optional[Mesh]):
  """A small value (a PRNG key, a learning rate) -> replicated on the mesh."""
  if mesh is None:
    return x
  return sharding.put_global(x, NamedSharding(mesh, P()))


def jit_step(fn: Callable, mesh: Optional[Mesh], state_shardings, n_metrics: int) -> Callable:
  """jax.jit of fn(state, ...) -> (state, *n_metrics scalars): on a mesh the new state keeps
  `state_shardings` (no drift between steps, one compilation) and the metrics are replicated."""
  if mesh is None:
    return jax.jit(fn)
  rep = NamedSharding(mesh, P())
  return jax.jit(fn, out_shardings=(state_shardings,) + (rep,) * n_metrics)


def to_host(params: dict) -> dict[str, np.ndarray]:
  """Flat parameters -> full numpy arrays on this host (a collective across processes when split)."""
  return {k: sharding.host_value(v) for k, v in params.items()}


