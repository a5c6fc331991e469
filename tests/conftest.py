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


# Mosaic GPU interpret mode (test_kernels_mla_mosaic.py) runs a kernel's warpgroups as threads that execute
# nested CPU programs whose host callbacks block on each other (the kernel's barriers). Those callbacks hold
# threads of XLA's CPU intra-op pool, which is as large as the machine has cores: on 2 cores it starved and
# the kernel deadlocked, now and then (session 9: CI hung; gdb showed every pool thread blocked in a barrier
# callback or waiting for a nested program). Sized here, before any backend starts; subprocesses inherit it.
from custom_calls.mla_attention.mosaic_gpu import reserve_cpu_threads_for_interpret  # noqa: E402

reserve_cpu_threads_for_interpret()


def pytest_addoption(parser):
  parser.addoption("--run-slow", action="store_true", default=False, help="run tests marked slow")


def pytest_collection_modifyitems(config, items):
  if config.getoption("--run-slow"):
    return
  skip = pytest.mark.skip(reason="slow test: takes minutes on the CPU; run with --run-slow")
  for item in items:
    if "slow" in item.keywords:
      item.add_marker(skip)
