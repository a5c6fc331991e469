"""Several jax.distributed processes running one program: which one writes shared files, barriers, and
host values every process must agree on. With one process every function is trivial (no collective)."""
from __future__ import annotations

import jax
import numpy as np


def is_primary() -> bool:
  """True on process 0, the one that writes files shared by all processes (outputs, manifests, renames)."""
  return jax.process_index() == 0


def from_process_0(value: int) -> int:
  """Process 0's integer `value` on every process (a collective when there are several): for host
  decisions that every process must take alike (a step horizon from wall time, a directory name)."""
  if jax.process_count() == 1:
    return value
  from jax.experimental import multihost_utils
  return int(multihost_utils.broadcast_one_to_all(np.int32(value)))


def barrier(name: str) -> None:
  """Waits until every process has reached the barrier `name` (nothing with one process)."""
  if jax.process_count() == 1:
    return
  from jax.experimental import multihost_utils
  multihost_utils.sync_global_devices(name)
