"""Ordering between the programs of ONE grid through counters in global memory (the one-launch MoE kernels).

A program that produces part of an intermediate `arrive`s on a counter when its stores are done; a program that
consumes it `counter_wait`s until every producer has arrived. The consumer must come after all its producers in
the grid (or take its place from a ticket): CUDA starts a grid's programs in index order in practice, so the
producers have started and, waiting on nothing, finish. A wait that gives up after SPIN_LIMIT polls returns False,
and the caller poisons its output with NaN, so that a broken schedule fails a check instead of hanging the GPU.

The counters are int32 words of a small array that XLA makes fresh for each call, so no zero-fill runs: a fusion
when the array holds a traced value (pallas_gemv_pipelined's expert offset), otherwise a constant, which the kernel
updates in place as an aliased output (XLA's copy insertion gives each call its own copy; the GPU tests call each
kernel twice in one program to check it). The counters are never reset: a reused array would let every wait pass at
once, so nothing may hand the kernels one.
Interpreted (the CPU tests) programs run one after another in grid order: every wait is already met.
"""
import jax.numpy as jnp
from jax import lax
from jax.experimental.pallas import triton as plgpu

SPIN_LIMIT = 1 << 20        # polls of a counter before a waiting program gives up (~1 us each)


def arrive(sync_ref, index, *, interpret):
  """This program's stores are done: a CTA barrier (every thread's stores), then one acquire-release add of 1 to
  word `index` of sync_ref at GPU scope."""
  if not interpret:              # (the interpreter has no barrier; its programs run one after another)
    plgpu.debug_barrier()
  plgpu.atomic_add(sync_ref, index, jnp.int32(1))


def counter_wait(sync_ref, index, target, *, interpret):
  """Poll word `index` of sync_ref until it reaches target; True when it did (False: SPIN_LIMIT polls gave up)."""
  read = lambda: plgpu.atomic_add(sync_ref, index, jnp.int32(0))
  if interpret:                 # programs run in grid order: every arrival is in (a polling loop cannot be discharged)
    return read() >= target
  seen, _ = lax.while_loop(lambda s: (s[0] < target) & (s[1] < SPIN_LIMIT), lambda s: (read(), s[1] + 1),
                           (read(), jnp.int32(0)))
  return seen >= target


def poison_unless(ok):
  """f32 0 when ok, NaN otherwise: added to a waiting program's output tile."""
  return jnp.where(ok, jnp.float32(0.0), jnp.float32(jnp.nan))
