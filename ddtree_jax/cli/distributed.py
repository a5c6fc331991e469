"""Flags and start-up shared by every CLI: the device mesh and `jax.distributed` (several hosts).

  --mesh=DATAxMODEL            default: 1 x all visible devices (all processes); the trainers: all x 1
  --coordinator_address=H:P    with --num_processes and --process_id: one process per host, same program

Call `initialize()` first thing in `main` (before any JAX computation), then `mesh_from_flags()`.
"""
from __future__ import annotations

from typing import Callable, Optional, TypeVar

from absl import flags

FLAGS = flags.FLAGS
T = TypeVar("T")
flags.DEFINE_string("mesh", None, "device mesh DATAxMODEL, e.g. 1x8, 2x4, 8x1 (default: 1 x all visible devices; "
                    "the trainers: all visible devices x 1, data parallel)")
flags.DEFINE_string("coordinator_address", None, "jax.distributed coordinator host:port (process 0's address)")
flags.DEFINE_integer("num_processes", None, "jax.distributed: number of processes (one per host)")
flags.DEFINE_integer("process_id", None, "jax.distributed: this process's index in [0, num_processes)")


def initialize() -> None:
  """Starts jax.distributed when --coordinator_address / --num_processes / --process_id are given."""
  from ddtree_jax.cli.common import UsageError
  given = [f for f in ("coordinator_address", "num_processes", "process_id") if getattr(FLAGS, f) is not None]
  if not given:
    return
  if len(given) != 3:
    missing = sorted({"coordinator_address", "num_processes", "process_id"} - set(given))
    raise UsageError(f"jax.distributed needs --coordinator_address, --num_processes and --process_id "
                     f"(missing {', '.join('--' + m for m in missing)})")
  if FLAGS.num_processes < 1 or not 0 <= FLAGS.process_id < FLAGS.num_processes:
    raise UsageError(f"--process_id={FLAGS.process_id}: must be in [0, --num_processes={FLAGS.num_processes})")
  import jax
  if FLAGS.num_processes > 1:
    # CPU processes exchange collectives through gloo (GPU processes use NCCL; this setting is CPU-only).
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(coordinator_address=FLAGS.coordinator_address, num_processes=FLAGS.num_processes,
                             process_id=FLAGS.process_id)


def mesh_from_flags(data_parallel: bool = False) -> Optional["jax.sharding.Mesh"]:
  """The ("data", "model") mesh of --mesh over all devices of all processes; None on a single device
  without --mesh (the plain one-device program). Without --mesh: 1 x all devices, or all devices x 1
  with `data_parallel` (the trainers)."""
  import jax
  from ddtree_jax import sharding
  from ddtree_jax.cli.common import UsageError
  if FLAGS.mesh is None and jax.device_count() == 1:
    return None
  shape = FLAGS.mesh
  if shape is None and data_parallel:
    shape = (jax.device_count(), 1)
  try:
    return sharding.make_mesh(shape)
  except ValueError as e:
    raise UsageError(str(e)) from None


def trainer_mesh(batch: int, *, preset: str, batch_flag_given: bool) -> Optional["jax.sharding.Mesh"]:
  """A trainer's start-up: jax.distributed, the data-parallel mesh (all devices x 1 without --mesh), and a
  check that the training batch splits over its data axis. Raises UsageError / ValueError naming the flag."""
  from ddtree_jax.train import data_parallel
  initialize()
  mesh = mesh_from_flags(data_parallel=True)
  data_parallel.check_batch(batch, mesh, "--batch",
                            hint="" if batch_flag_given else f" (the {preset} preset's; --batch overrides it)")
  return mesh


def process_0_first(fn: Callable[[], T]) -> T:
  """fn() on process 0, then (after a barrier) on the other processes: with a shared working directory
  they find what process 0 wrote (a corpus, a tokenizer) instead of writing the same files at once."""
  import jax
  if jax.process_count() == 1:
    return fn()
  from ddtree_jax import processes
  out, failed = None, False
  if processes.is_primary():
    try:
      out = fn()
    except BaseException:
      failed = True
      raise
    finally:   # always reach the collective, so a failure on process 0 stops the others instead of hanging them
      processes.from_process_0(0 if failed else 1)
    return out
  if processes.from_process_0(1) != 1:
    raise RuntimeError("process 0 failed while preparing shared files (see its error); stopping this process too")
  return fn()


def describe(mesh) -> str:
  import jax
  if mesh is None:
    return f"1 device ({jax.devices()[0].platform})"
  d, m = mesh.shape["data"], mesh.shape["model"]
  return (f"mesh {d}x{m} (data x model) over {mesh.size} {jax.devices()[0].platform} devices, "
          f"{jax.process_count()} process(es)")
