"""Lower a function's Pallas Triton kernels for an abstract NVIDIA GPU, on any machine (no GPU needed).

Pallas builds each kernel's Triton module at lowering time; with an abstract device in the mesh context the
lowering runs for the CUDA platform on a CPU-only machine. `on_module` sees every Triton module built
(tests/test_kernels_lowering.py verifies them; benchmarks/sass_report.py writes them out for ptxas). It uses
jax._src (private): the project pins jax 0.11.2 on every machine.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable

import jax
from jax._src.pallas.triton import pallas_call_registration


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


def abstract_gpu_mesh(device_kind: str = "NVIDIA H200", num_cores: int = 132):
  """A one-device abstract mesh of an NVIDIA GPU: under jax.sharding.use_abstract_mesh(it), Pallas kernels
  (Triton, and Mosaic GPU in interpret mode too) trace and lower for the GPU on a machine without one."""
  device = jax.sharding.AbstractDevice(device_kind=device_kind, num_cores=num_cores, platform="gpu")
  return jax.sharding.AbstractMesh((1,), ("x",), axis_types=(jax.sharding.AxisType.Auto,), abstract_device=device)


def lower_for_abstract_gpu(fn, *abstract_args, on_module: Callable[[Any], None],
                           device_kind: str = "NVIDIA H200", num_cores: int = 132):
  """jax.jit(fn) lowered for CUDA with an abstract `device_kind`; on_module(mlir module) per Triton kernel."""
  mesh = abstract_gpu_mesh(device_kind, num_cores)
  with _watch_triton_modules(on_module), jax.sharding.use_abstract_mesh(mesh):
    return jax.jit(fn).trace(*abstract_args).lower(lowering_platforms=("cuda",))
