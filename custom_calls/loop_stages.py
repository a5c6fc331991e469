"""A hint for the Pallas Triton lowering: pipeline the global loads of the enclosing loop, even without a dot.

Triton's software pipeliner turns a loop's global loads into asynchronous copies into shared memory, several
trips ahead (`num_stages` - 1 trips in flight, held in shared memory rather than registers). It does this by
itself only for loads that feed a `tl.dot`; the loads of a dot-free loop (the INT4 gemv's word tiles) are
pipelined only when the loop carries the `tt.num_stages` attribute, which Triton's Python front end sets from
`tl.range(..., num_stages=n)`. Pallas lowers `lax.fori_loop` to a bare `scf.for`, so it never sets it.

`pipeline_loop_loads(i, num_stages)` returns i unchanged. Called on the loop index at the top of a
`lax.fori_loop` body (static trip count, so that the loop lowers to `scf.for`), its Triton lowering rule sets
`tt.num_stages` on that `scf.for`. Elsewhere (interpret mode, XLA) it is the identity. Loads narrower than
32 bits a thread, and loads whose address depends on another load of the same trip, stay synchronous (the
pipeliner's own rules).

`pipeline_load(value, latency)` instead picks the loads: it returns the loaded value unchanged and sets
`tt.latency` on the `tt.load` that produced it. A loop in which any op carries `tt.latency` is scheduled from
those latencies alone, so only the marked loads are pipelined (latency L: issued L trips ahead, L = num_stages - 1);
the others (the gemv's activations, cache hits) stay plain loads and take no shared memory.

This reaches into jax's private Pallas Triton lowering (`jax._src.pallas.triton.lowering`), whose rule table is
the only way to lower a new primitive there; jax is pinned (pyproject.toml), and a missing table fails at import.
"""
from __future__ import annotations

from jax._src import core as jax_core
from jax._src.interpreters import mlir
from jax._src.lib.mlir import ir
from jax._src.pallas.triton import lowering as triton_lowering

NUM_STAGES_ATTR = "tt.num_stages"          # mlir::triton::kNumStagesAttrName
LATENCY_ATTR = "tt.latency"                # Triton's user-provided latency of one op (AssignLatencies)

pipeline_loop_loads_p = jax_core.Primitive("pipeline_loop_loads")
pipeline_loop_loads_p.def_impl(lambda i, **_: i)
pipeline_loop_loads_p.def_abstract_eval(lambda aval, **_: aval)
mlir.register_lowering(pipeline_loop_loads_p, lambda ctx, i, **_: [i])


def pipeline_loop_loads(i, num_stages: int):
  """i (the loop index, unchanged); marks the enclosing fori_loop for Triton's pipeliner with num_stages >= 2."""
  if not isinstance(num_stages, int) or num_stages < 2:
    raise ValueError(f"pipeline_loop_loads: num_stages {num_stages!r} must be an int >= 2")
  return pipeline_loop_loads_p.bind(i, num_stages=num_stages)


def _lower_in_triton(ctx, i, *, num_stages):
  loop = ir.InsertionPoint.current.block.owner     # the op whose body is being lowered
  if loop.operation.name != "scf.for":
    raise ValueError(f"pipeline_loop_loads: must be called directly in the body of a lax.fori_loop with a static "
                     f"trip count (lowered to scf.for); it is inside {loop.operation.name}")
  loop.operation.attributes[NUM_STAGES_ATTR] = ir.IntegerAttr.get(ir.IntegerType.get_signless(32), num_stages)
  return i


triton_lowering.register_lowering(pipeline_loop_loads_p)(_lower_in_triton)


pipeline_load_p = jax_core.Primitive("pipeline_load")
pipeline_load_p.def_impl(lambda x, **_: x)
pipeline_load_p.def_abstract_eval(lambda aval, **_: aval)
mlir.register_lowering(pipeline_load_p, lambda ctx, x, **_: [x])


def pipeline_load(x, latency: int):
  """x (a value just loaded from a ref inside a fori_loop body, unchanged); its load is issued `latency` trips ahead."""
  if not isinstance(latency, int) or latency < 1:
    raise ValueError(f"pipeline_load: latency {latency!r} must be an int >= 1")
  return pipeline_load_p.bind(x, latency=latency)


def _lower_load_in_triton(ctx, x, *, latency):
  load = x.owner if not isinstance(x, ir.BlockArgument) else None
  if load is None or load.operation.name != "tt.load":
    raise ValueError(f"pipeline_load: its argument must come straight from a load of a ref (a tt.load), not from "
                     f"{'a block argument' if load is None else load.operation.name}")
  load.operation.attributes[LATENCY_ATTR] = ir.IntegerAttr.get(ir.IntegerType.get_signless(32), latency)
  return x


triton_lowering.register_lowering(pipeline_load_p)(_lower_load_in_triton)
