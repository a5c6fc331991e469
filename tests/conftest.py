import importlib.util
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

# The CPU suite's time is mostly XLA compilation of small programs that then run for milliseconds: compile
# them with LLVM at -O0 (about 40% less compile time; XLA's HLO passes, the numerics and the HLO the tests
# inspect are unchanged). Set here, before any backend starts, so that the subprocesses inherit it (the
# tests that set XLA_FLAGS for a subprocess append to it). Not on a machine with a CUDA plugin (the GPU
# tests run optimised code), nor when XLA_FLAGS already chooses a level; DDTREE_TEST_XLA_O0=0 turns it off.
_O0 = "--xla_backend_optimization_level=0"
if (os.environ.get("DDTREE_TEST_XLA_O0", "1") != "0"
    and "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", "")
    and not any(importlib.util.find_spec(m) for m in ("jax_cuda12_plugin", "jax_cuda13_plugin"))):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _O0).strip()


# One JAX persistent compilation cache for the subprocesses the tests start (they inherit the environment): they
# compile the same small programs again and again (each CLI test runs ddtree-generate several times on one tiny
# checkpoint; the notebooks, the two-process runs, the 8-device workers). Measured (session 31, 2 cores): a second
# `ddtree-generate` run of the tiny checkpoint took 4.2 s instead of 10.8 s; tests/test_cli_generate.py 85 s instead
# of 116 s. The pytest processes themselves do not use it: their own jit caches already keep what they compiled,
# and writing every program to the cache made test_spec_lossless.py 6% slower (133 s against 125 s).
# The directory is new for each run (made by the first pytest process to load this file: the xdist controller, or
# pytest alone), shared with the workers through _CACHE_OWNED, and removed by its maker at exit, so no executable
# outlives the run that compiled it. A hit returns what XLA compiled from the same HLO with the same flags, so the
# tests check the same programs. DDTREE_TEST_COMPILE_CACHE=0 turns it off; a JAX_COMPILATION_CACHE_DIR that the
# environment already names is used as it is, in every process, and not removed.
_CACHE_OWNED = "DDTREE_TEST_COMPILE_CACHE_DIR"


def _subprocess_compilation_cache():
  """Sets up the cache's environment; returns whether this process should turn the cache off for itself."""
  if os.environ.get("DDTREE_TEST_COMPILE_CACHE", "1") == "0":
    return False
  if os.environ.get(_CACHE_OWNED):                        # an xdist worker of a run whose controller made it
    return True
  if os.environ.get("JAX_COMPILATION_CACHE_DIR"):         # the user's own cache
    return False
  import atexit
  import shutil
  import tempfile
  path = tempfile.mkdtemp(prefix="ddtree-test-xla-cache-")
  os.environ["JAX_COMPILATION_CACHE_DIR"] = os.environ[_CACHE_OWNED] = path
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.1")   # not the many tiny eager-op programs
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
  # A size limit turns on JAX's file lock around every read and write of the cache (without one, a process could
  # read an entry another is still writing; JAX would warn and compile it again).
  os.environ.setdefault("JAX_COMPILATION_CACHE_MAX_SIZE", str(8 << 30))
  atexit.register(shutil.rmtree, path, ignore_errors=True)
  return True


_CACHE_OFF_HERE = _subprocess_compilation_cache()


# Mosaic GPU interpret mode (test_kernels_mla_mosaic.py) runs a kernel's warpgroups as threads that execute
# nested CPU programs whose host callbacks block on each other (the kernel's barriers). Those callbacks hold
# threads of XLA's CPU intra-op pool, which is as large as the machine has cores: on 2 cores it starved and
# the kernel deadlocked, now and then (session 9: CI hung; gdb showed every pool thread blocked in a barrier
# callback or waiting for a nested program). Sized here, before any backend starts; subprocesses inherit it.
from custom_calls.mla_attention.mosaic_gpu import reserve_cpu_threads_for_interpret  # noqa: E402

reserve_cpu_threads_for_interpret()

if _CACHE_OFF_HERE:
  import jax  # noqa: E402

  jax.config.update("jax_enable_compilation_cache", False)


def pytest_addoption(parser):
  parser.addoption("--run-slow", action="store_true", default=False, help="run tests marked slow")
  parser.addoption("--run-e2e", action="store_true", default=False,
                   help="run tests marked e2e (the end-to-end tier: `make test-e2e`, run by CI after `make test`)")


# marker -> (option that runs it, reason a skipped test shows)
_OPT_IN_TIERS = {
    "slow": ("--run-slow", "slow test: takes minutes on the CPU; run with --run-slow (make test-all)"),
    "e2e": ("--run-e2e", "end-to-end tier (processes, notebooks, training and whole-engine runs): run by "
                         "`make test-e2e` and by CI (.ci/run) after `make test`"),
}


def pytest_collection_modifyitems(config, items):
  for marker, (option, reason) in _OPT_IN_TIERS.items():
    if config.getoption(option):
      continue
    skip = pytest.mark.skip(reason=reason)
    for item in items:
      if item.get_closest_marker(marker):      # the marker itself (keywords would also match a file or folder name)
        item.add_marker(skip)
