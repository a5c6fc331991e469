"""What the kernel tests compare with: the relative error of a kernel's output against its reference, and the
Triton modules a function's kernels lower to for an H200 (checked, on any machine)."""
import jax.numpy as jnp
import numpy as np


def rel_err(out, ref):
  """||out - ref|| / ||ref|| in float64 (out in any float dtype, bf16 included); out must be finite."""
  out = np.asarray(jnp.asarray(out, jnp.float32), np.float64)
  ref = np.asarray(ref, np.float64)
  assert np.all(np.isfinite(out)), "non-finite values in the kernel output"
  return np.linalg.norm(out - ref) / np.linalg.norm(ref)


def assert_no_float_add_on_int_pointers(module):
  """Pallas (jax 0.11.2) lowers an atomic add of an integer VECTOR as a float add (`atomic_rmw fadd` on i32
  pointers), which the GPU runs as a float add of the ints' bits (flushed to 0 as denormals): benchmarks/RESULTS.md,
  issue 6 thirty-second round. No kernel may contain one (grid_sync.arrive_and_broadcast sets its flags by exchange)."""
  bad = [line.strip() for line in module.operation.get_asm(enable_debug_info=False).splitlines()
         if "atomic_rmw fadd" in line and ("ptr<i32>" in line or "ptr<i64>" in line)]
  assert not bad, f"integer atomic add lowered as a float add: {bad[:2]}"


def lowered_for_h200(fn, *abstract_args):
  """jax.jit(fn) lowered for CUDA with an abstract H200 (custom_calls.gpu_lowering, no GPU needed): (the Lowered
  program, the text of each Triton module its kernels build, in order), each module after the MLIR verifier (an
  MLIRError names the failing op) and assert_no_float_add_on_int_pointers ran on it."""
  from custom_calls.gpu_lowering import lower_for_abstract_gpu
  texts = []

  def check(module):
    module.operation.verify()
    assert_no_float_add_on_int_pointers(module)
    texts.append(module.operation.get_asm(enable_debug_info=False))

  return lower_for_abstract_gpu(fn, *abstract_args, on_module=check), texts


def triton_modules_for_h200(fn, *abstract_args):
  """The checked Triton module texts of lowered_for_h200."""
  return lowered_for_h200(fn, *abstract_args)[1]
