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


def text_from_process_0(text):
  """Process 0's `text` (a str, or None) on every process, e.g. a line only process 0 read from its stdin
  (a collective when there are several: every process calls it; the others' argument is ignored)."""
  if jax.process_count() == 1:
    return text
  from jax.experimental import multihost_utils
  data = text.encode("utf-8", "replace") if (is_primary() and text is not None) else b""
  length = from_process_0(-1 if (is_primary() and text is None) else len(data))
  if length < 0:
    return None
  # padded to a power of two (at least 64 bytes): the broadcast compiles once per buffer shape, not per line length
  buf = np.zeros(max(64, 1 << (length - 1).bit_length()), np.uint8)
  if is_primary():
    buf[:length] = np.frombuffer(data, np.uint8)
  got = np.asarray(multihost_utils.broadcast_one_to_all(buf))[:length]
  return bytes(got).decode("utf-8", "replace")
