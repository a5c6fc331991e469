"""INT4 MoE for a few tokens in ONE persistent kernel: every gate/up tile, a grid-wide barrier, every down tile.

pallas_gemv.py runs the few-token MoE as three launches: an XLA kernel that lays out the activation planes, the
gate/up kernel, and the down kernel. At one token the weights of the one local expert take ~9 us at the copy rate,
and each launch boundary costs the tail of one kernel (its last programs running while most SMs idle) and the ramp
of the next (its first loads waiting on DRAM from cold). Here one launch does it all:

- Grid = programs_per_sm x the SM count, every program resident at once (the barrier needs them all running).
  Program p takes the work items p, p + G, p + 2G, ... of each phase, an item being one (column tile, token).
- Phase 1 (gate/up): for its items, h[pair, tile] of the token's local pairs, exactly pallas_gemv's
  `gate_up_run` (its K loop, nibble planes and h rounding), reading x as given and making the activation
  planes in registers (tile_gemv's act_from_x): no XLA kernel before this one.
- Barrier: the program's threads sync, one thread adds 1 to a counter in global memory (acquire-release at GPU
  scope: h written by this program is visible to any program that sees the count), then polls it until all G
  programs have arrived. The counter is the third word of the constants array, which XLA builds for each call
  (expert offset, MAGIC, 0) and the kernel aliases as an output, so no separate zero-fill runs.
- Phase 2 (down): for its items, out[token, tile] = pallas_gemv's `down_token_tile`, written once.

Residency: a program of num_warps warps must fit programs_per_sm times on an SM (registers: at most
65536 / (programs_per_sm * 32 * num_warps) a thread, 128 at 4 programs of 4 warps). If they do not, some programs
would wait for others that cannot start: the poll gives up after `spin_limit` tries (about a second) and the
output is NaN, so a wrong residency shows as a failed check rather than a hung GPU.

Under the Pallas interpreter the programs run one after another, so a barrier cannot be met: there the same two
phase bodies run as two launches (gate/up, then down), which tests what they compute but not the barrier; the
barrier and the single launch are tested on a GPU (tests/test_kernels_moe.py, `gpu` mark).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from custom_calls.moe_int4.k_chunks import check_block_k, check_scales, logical_shape
from custom_calls.moe_int4.nibbles import MAGIC
from custom_calls.moe_int4.pallas_gemv import down_token_tile, gate_up_run, supported

# Up to this many tokens the persistent kernel is meant for (each program walks a token's top-k pairs per item).
PERSISTENT_MAX_TOKENS = 8
SYNC_WORD = 2                    # index of the barrier's counter in the constants array (offset, MAGIC, counter)
H200_SMS = 132                   # SMs of an H100 / H200 SXM, when the device does not say


def sm_count():
  """Streaming multiprocessors of the first local device (its `core_count`), or H200_SMS off a GPU."""
  count = getattr(jax.local_devices()[0], "core_count", None)
  return int(count) if jax.default_backend() == "gpu" and count else H200_SMS


def _persistent_kernel(*refs, phases, top_k, num_local, block_n, block_n_down, block_k, block_k_down, group_size,
                       h_dtype, prefetch, spin_limit):
  """Program p of G: phase "gate_up" on items p, p + G, ... of (I / BN tiles) x N, then (with "barrier") waits for
  all G programs, then phase "down" on items of (D / BN_down tiles) x N.

  refs by phases: ("gate_up", "barrier", "down"): consts, ids, wts, x, gw, gs, uw, us, dw, ds | hp, out, sync;
  ("gate_up",): consts, ids, wts, x, gw, gs, uw, us | hp, sync; ("down",): consts, ids, wts, hp, dw, ds | out.
  consts: [3] i32 (expert offset, MAGIC, 0); sync: the same array (aliased), word SYNC_WORD counts arrivals;
  ids/wts: [P] (token-major); x: [N, D] as given; gw/uw: int32 [E, I, D/8]; gs/us: [E, I, D/g];
  dw: int32 [E, D, I/8]; ds: [E, D, I/g] (or k-chunked); hp: f32 [P, 8 * I/8] planes; out: [N, D].
  """
  if phases == ("gate_up",):
    consts_ref, ids_ref, wts_ref, x_ref, gw_ref, gs_ref, uw_ref, us_ref, hp_ref, sync_ref = refs
  elif phases == ("down",):
    consts_ref, ids_ref, wts_ref, hp_ref, dw_ref, ds_ref, out_ref = refs
  else:
    consts_ref, ids_ref, wts_ref, x_ref, gw_ref, gs_ref, uw_ref, us_ref, dw_ref, ds_ref, hp_ref, out_ref, sync_ref = refs
  program, programs = pl.program_id(0), pl.num_programs(0)
  tokens = ids_ref.shape[0] // top_k
  poison = jnp.float32(0.0)

  if "gate_up" in phases:
    tiles = hp_ref.shape[1] // block_n
    run = functools.partial(gate_up_run, x_ref=x_ref, gw_ref=gw_ref, gs_ref=gs_ref, uw_ref=uw_ref, us_ref=us_ref,
                            hp_ref=hp_ref, magic=consts_ref[1], top_k=top_k, block_n=block_n, block_k=block_k,
                            group_size=group_size, h_dtype=h_dtype, prefetch=prefetch, act_from_x=True)

    def gate_up_item(i):
      n0, t = (i % tiles) * block_n, i // tiles
      for k in range(top_k):                  # straight-line: the token's expert ids are independent loads
        pair = t * top_k + k
        e = ids_ref[pair] - consts_ref[0]
        run([pair], [(e >= 0) & (e < num_local)], e, n0=n0)
      return i + programs

    lax.while_loop(lambda i: i < tiles * tokens, gate_up_item, program)

  if "barrier" in phases:
    plgpu.debug_barrier()                     # this program's h stores happen before its arrival
    arrived = plgpu.atomic_add(sync_ref, SYNC_WORD, 1) + 1

    def poll(state):
      return plgpu.atomic_add(sync_ref, SYNC_WORD, 0), state[1] + 1

    seen, _ = lax.while_loop(lambda s: (s[0] < programs) & (s[1] < spin_limit), poll, (arrived, jnp.int32(0)))
    plgpu.debug_barrier()
    poison = jnp.where(seen < programs, jnp.float32(jnp.nan), poison)   # gave up: never a silent wrong sum

  if "down" in phases:
    tiles = out_ref.shape[1] // block_n_down

    def down_item(i):
      n0, t = (i % tiles) * block_n_down, i // tiles
      acc = down_token_tile(t, n0, consts_ref, ids_ref, wts_ref, hp_ref, dw_ref, ds_ref, top_k=top_k,
                            num_local=num_local, block_n=block_n_down, block_k=block_k_down, group_size=group_size,
                            prefetch=prefetch, unroll_pairs=True)
      out_ref[t, pl.ds(n0, block_n_down)] = (acc + poison).astype(out_ref.dtype)
      return i + programs

    lax.while_loop(lambda i: i < tiles * tokens, down_item, program)


@functools.partial(jax.jit, static_argnames=("group_size", "block_n", "block_n_down", "block_k", "block_k_down",
                                             "num_warps", "programs_per_sm", "num_programs", "prefetch",
                                             "spin_limit", "interpret"))
def routed_experts_int4_persistent(x, expert_ids, expert_weights, gate_packed, gate_scale, up_packed, up_scale,
                                   down_packed, down_scale, expert_offset=0, *, group_size=32, block_n=4,
                                   block_n_down=8, block_k=1024, block_k_down=None, num_warps=4, programs_per_sm=4,
                                   num_programs=None, prefetch=None, spin_limit=1 << 20, interpret=False):
  """Same contract as reference.routed_experts_int4_reference (either expert layout, as pallas_gemv).

  block_n / block_n_down: output columns of a gate/up / down item; block_k / block_k_down: the K steps.
  num_programs: the grid (default programs_per_sm x sm_count()); every program must be resident at once (see
  the module docstring). prefetch: tile_gemv's (default 1 at one token, 0 above, as pallas_gemv).
  interpret: the Pallas interpreter, the two phases as two launches (no barrier)."""
  n, d = x.shape
  top_k = expert_ids.shape[1]
  e, inter, _ = logical_shape(gate_packed)
  block_k = min(block_k, d, inter)
  block_k_down = min(block_k_down or block_k, inter)
  if n > PERSISTENT_MAX_TOKENS:
    raise ValueError(f"routed_experts_int4_persistent: {n} tokens; this kernel takes at most "
                     f"{PERSISTENT_MAX_TOKENS} (use pallas_gemv or the grouped kernels)")
  if not supported(x, gate_packed, down_packed, group_size, block_k):
    raise ValueError(f"routed_experts_int4_persistent: unsupported shapes x {x.shape} {x.dtype}, gate_packed "
                     f"{gate_packed.shape}, down_packed {down_packed.shape}, group {group_size}, block_k {block_k}")
  if inter % block_n or d % block_n_down:
    raise ValueError(f"routed_experts_int4_persistent: block_n {block_n} must divide I = {inter} and block_n_down "
                     f"{block_n_down} must divide D = {d}")
  if up_packed.shape != gate_packed.shape:
    raise ValueError(f"routed_experts_int4_persistent: up_packed {tuple(up_packed.shape)} and gate_packed "
                     f"{tuple(gate_packed.shape)} must have one shape (one layout)")
  check_scales("routed_experts_int4_persistent", gate_packed, gate_scale, up_scale, down_packed, down_scale,
               group_size)
  check_block_k("routed_experts_int4_persistent (gate/up)", gate_packed, block_k, multiples=True)
  check_block_k("routed_experts_int4_persistent (down)", down_packed, block_k_down, multiples=True,
                what="block_k_down")
  programs = num_programs or programs_per_sm * sm_count()
  if programs < 1:
    raise ValueError(f"routed_experts_int4_persistent: num_programs {programs} must be >= 1")
  prefetch = (1 if n == 1 else 0) if prefetch is None else prefetch
  p = n * top_k
  ids = expert_ids.reshape(p).astype(jnp.int32)
  wts = expert_weights.reshape(p).astype(jnp.float32)
  consts = jnp.stack([jnp.asarray(expert_offset, jnp.int32), jnp.int32(MAGIC), jnp.int32(0)])
  kernel = functools.partial(_persistent_kernel, top_k=top_k, num_local=e, block_n=block_n,
                             block_n_down=block_n_down, block_k=block_k, block_k_down=block_k_down,
                             group_size=group_size, h_dtype=x.dtype, prefetch=prefetch, spin_limit=spin_limit)
  call = functools.partial(pl.pallas_call, grid=(programs,), interpret=interpret,
                           compiler_params=plgpu.CompilerParams(num_warps=num_warps, num_stages=1))
  h_shape = jax.ShapeDtypeStruct((p, inter), jnp.float32)
  out_shape = jax.ShapeDtypeStruct((n, d), x.dtype)
  sync_shape = jax.ShapeDtypeStruct((3,), jnp.int32)
  if interpret:                 # programs run one after another: the phases as two launches, no barrier
    hp, _ = call(functools.partial(kernel, phases=("gate_up",)), out_shape=(h_shape, sync_shape),
                 input_output_aliases={0: 1}, name="moe_int4_persistent_gate_up")(
                     consts, ids, wts, x, gate_packed, gate_scale, up_packed, up_scale)
    return call(functools.partial(kernel, phases=("down",)), out_shape=out_shape, name="moe_int4_persistent_down")(
        consts, ids, wts, hp, down_packed, down_scale)
  _, out, _ = call(functools.partial(kernel, phases=("gate_up", "barrier", "down")),
                   out_shape=(h_shape, out_shape, sync_shape), input_output_aliases={0: 2},
                   name="moe_int4_persistent")(consts, ids, wts, x, gate_packed, gate_scale, up_packed, up_scale,
                                               down_packed, down_scale)
  return out


__all__ = ["routed_experts_int4_persistent", "PERSISTENT_MAX_TOKENS", "sm_count"]
