"""Lower a function's Pallas kernels for an abstract NVIDIA GPU, on any machine (no GPU needed).

Pallas builds each kernel's Triton module, and Mosaic GPU each kernel's whole code, at lowering time; with an
abstract device in the mesh context the lowering runs for the CUDA platform on a CPU-only machine. `on_module`
sees every Triton module built (tests/test_kernels_lowering.py verifies them; benchmarks/sass_report.py writes them
out for ptxas), `on_mosaic_module` every Mosaic GPU module before it is serialised (benchmarks/mosaic_ops_report.py
counts its operations). It uses private jax APIs (jax._src.pallas.triton, jax.experimental.mosaic.gpu.core's
_run_serde_pass): the project pins jax 0.11.2 on every machine.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Optional

import jax
from jax._src.pallas.triton import pallas_call_registration
from jax.experimental.mosaic.gpu import core as mosaic_core


@contextlib.contextmanager
def _watch_triton_modules(on_module: Callable[[Any], None]):
  lowering = pallas_call_registration.lowering
  original = lowering.lower_jaxpr_to_triton_module

  def lower_and_watch(*args, **kwargs):
    result = original(*args, **kwargs)
    on_module(result.module)
    return result

  lowering.lower_jaxpr_to_triton_module = lower_and_watch
  try:
    yield
  finally:
    lowering.lower_jaxpr_to_triton_module = original


@contextlib.contextmanager
def _watch_mosaic_modules(on_module: Callable[[Any], None]):
  original = mosaic_core._run_serde_pass

  def watch_and_serialise(module, **kwargs):
    on_module(module)
    return original(module, **kwargs)

  mosaic_core._run_serde_pass = watch_and_serialise
  try:
    yield
  finally:
    mosaic_core._run_serde_pass = original


def abstract_gpu_mesh(device_kind: str = "NVIDIA H200", num_cores: int = 132):
  """A one-device abstract mesh of an NVIDIA GPU: under jax.sharding.use_abstract_mesh(it), Pallas kernels
  (Triton, and Mosaic GPU in interpret mode too) trace and lower for the GPU on a machine without one."""
  device = jax.sharding.AbstractDevice(device_kind=device_kind, num_cores=num_cores, platform="gpu")
  return jax.sharding.AbstractMesh((1,), ("x",), axis_types=(jax.sharding.AxisType.Auto,), abstract_device=device)


def lower_for_abstract_gpu(fn, *abstract_args, on_module: Optional[Callable[[Any], None]] = None,
                           on_mosaic_module: Optional[Callable[[Any], None]] = None,
                           device_kind: str = "NVIDIA H200", num_cores: int = 132):
  """jax.jit(fn) lowered for CUDA with an abstract `device_kind`; on_module(mlir module) per Triton kernel,
  on_mosaic_module(mlir module) per Mosaic GPU kernel."""
  mesh = abstract_gpu_mesh(device_kind, num_cores)
  with contextlib.ExitStack() as watching:
    if on_module:
      watching.enter_context(_watch_triton_modules(on_module))
    if on_mosaic_module:
      watching.enter_context(_watch_mosaic_modules(on_mosaic_module))
    with jax.sharding.use_abstract_mesh(mesh):
      return jax.jit(fn).trace(*abstract_args).lower(lowering_platforms=("cuda",))
