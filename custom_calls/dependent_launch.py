"""Programmatic dependent launch (PDL, sm_90+) from inside a Pallas Triton kernel: let the next kernel start early.

On Hopper, XLA launches its own kernels and every Triton kernel, Pallas ones included, with PDL
(xla_gpu_enable_pdl, on by default) and puts a `griddepcontrol.wait` at the very start of each (XLA's
InsertPDLPass; the sm_90 SASS has it before any load, benchmarks/RESULTS.md issue 6 twenty-fourth and forty-fourth
rounds). A Pallas Mosaic GPU kernel is a PDL launch only if it calls plgpu.griddepcontrol_wait itself. Such a
kernel's programs may be placed on the SMs before the kernel before it ends, but only once every program of that
kernel has issued `griddepcontrol.launch_dependents` or exited; they sit in the wait (a hardware wait, no polling)
until it has completed and its stores are visible. XLA issues launch_dependents only in its own Triton GEMM
fusions, never in a Pallas kernel, so without this module the kernel after a Pallas kernel has its programs placed
only after the Pallas kernel's last program exits.

`launch_dependents(value)` issues it early. It does not change what any kernel computes: the next kernel still
waits for this one to complete before its first load. What it can change is the gap between the two (the next
kernel's program placement and start-up overlap this kernel's tail), and which SM slots the next kernel's waiting
programs hold while this one runs (all of this kernel's programs have been placed by then: the trigger needs every
one of them to issue it).

Interpreted (the CPU tests) nothing is issued: the interpreter runs no PTX and launches nothing early.
"""
import jax
import jax.numpy as jnp
from jax.experimental.pallas import triton as plgpu


def launch_dependents(value, *, interpret):
  """Issue `griddepcontrol.launch_dependents` (every thread of the program), then return the int32 scalar `value`
  unchanged. Pass a value the kernel's loads depend on (its program id): what uses the result is ordered after
  the instruction, which is otherwise free to move or be dropped (Pallas lowers inline asm as pure)."""
  if interpret:
    return value
  # on a [1] vector: the Pallas Triton lowering gives a scalar asm a 0-d tensor type that scalar code cannot mix with
  [out] = plgpu.elementwise_inline_asm("griddepcontrol.launch_dependents;\n\tmov.u32 $0, $1;",
                                       args=[jnp.broadcast_to(jnp.asarray(value, jnp.int32), (1,))],
                                       constraints="=r,r", pack=1,
                                       result_shape_dtypes=[jax.ShapeDtypeStruct((1,), jnp.int32)])
  return jnp.sum(out)
