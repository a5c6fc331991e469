"""INT4 grouped MoE in ONE launch: pallas_triton's gate/up and down programs in one grid.

pallas_triton runs the routed pairs, sorted by expert and padded to row blocks of BM, through two launches: the
gate/up kernel (grid: row block x I tile), then the down kernel (row block x D tile). pallas_gemv_pipelined.py
measured what the boundary between two such launches costs at a few tokens (the GPU drains, then ramps again:
H100, issue 6 twenty-seventh round, 100.6 us in one launch against the grouped kernels' 107.6 at 8 tokens). This
kernel removes that boundary from the grouped kernels, which read each hit expert once per row block (the gemv
reads it once per token), for the token counts above the gemv's. The grid, NB row blocks, G = I/BN gate/up tiles,
Dn = D/BND down tiles:

    gate/up (block 0, tile 0 .. G-1) .. (block NB-1, ...) | down (block 0, tile 0 .. Dn-1) .. (block NB-1, ...)

- A gate/up program of a used block runs pallas_triton.gate_up_block, then arrives on its block's counter
  (grid_sync.arrive).
- A down program of a used block waits until all G gate/up programs of its block have arrived
  (grid_sync.counter_wait), then runs pallas_triton.down_block: the same sums as the down kernel. A wait that gives
  up writes NaN into its tile.
- Programs of unused blocks (past the routed pairs) return at once, as in the two kernels.
- A down program only waits on programs placed before it in the grid; that relies on CUDA starting a grid's
  programs in index order (grid_sync.py). The counters are words of the constants array, which also holds
  nibbles.MAGIC: [MAGIC, counter of block 0 .. NB-1].
- Both parts compile into one kernel with one num_warps / num_stages; its registers are the larger part's (96 at
  10 tokens on k-chunked experts, no stack; the two kernels: 80 and 96).

H100, k-chunked 256 experts, us per call against the two launches (benchmarks/RESULTS.md, issue 6 twenty-ninth
round): 8 tokens 96.2-96.4 (against the one-launch gemv's 99.1-100.2), 10 tokens 107.4-107.5 against 116.2-116.5,
24: 201.6 against 247.7, 32: 227.3-228.9 against 262.5-263.7, 64: 349.2 against 393.4, 512: 489.2 against 515.8;
ties from 1024 tokens (compute-bound) and with the one-launch gemv at 6-7 tokens.

Numerics: the same as pallas_triton's two kernels (the same tile code in another program order), bit for bit under
the Pallas interpreter (tests/test_moe_grouped_one_launch.py); on the GPU checked against the XLA reference.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from custom_calls.moe_int4.grid_sync import arrive, check_sleep_ns, counter_wait, poison_unless
from custom_calls.moe_int4.k_chunks import logical_shape
from custom_calls.moe_int4.nibbles import MAGIC
from custom_calls.moe_int4.pallas_triton import (combine, down_block, down_block_options, gate_up_block,
                                                 gate_up_block_options, grouped_options, kernel_activations, route)

_FIRST_COUNTER = 1          # consts: [MAGIC, counter of row block 0 .. NB-1]


def program_place(q, *, blocks, gate_up_programs, down_programs):
  """Grid place q (0 <= q < NB * (G + Dn)) -> (is gate/up, row block, column tile), in the module docstring's
  order. Traced int32 scalars in and out (also used by the tests with Python ints)."""
  g, dn = gate_up_programs, down_programs
  q = jnp.asarray(q, jnp.int32)
  gate_up = q < blocks * g
  r = q - blocks * g                                     # place among the down programs
  return gate_up, jnp.where(gate_up, q // g, r // dn), jnp.where(gate_up, q % g, r % dn)


def _one_launch_kernel(consts_ref, bvalid_ref, bexp_ref, tok_ref, x_ref, gw_ref, gs_ref, uw_ref, us_ref, dw_ref,
                       ds_ref, h_ref, y_ref, sync_ref, *, blocks, gate_up_programs, down_programs, gate_up_kw, down_kw,
                       wait_sleep_ns, interpret):
  """One program of the grid (module docstring). consts (aliased by sync): [1 + NB] i32 (word 0 is MAGIC, which the
  tile code reads as magic_ref[0]); bvalid/bexp: [NB] i32; tok: [P_pad] i32; x: [N, D] (planar: planes layout);
  h: [P_pad, I] (written by the gate/up programs, read by the down programs); y: f32 [P_pad, D]."""
  gate_up, blk, jn = program_place(pl.program_id(0), blocks=blocks, gate_up_programs=gate_up_programs,
                                   down_programs=down_programs)
  used = bvalid_ref[blk] != 0

  @pl.when(gate_up & used)
  def _():
    gate_up_block(consts_ref, bexp_ref, tok_ref, x_ref, gw_ref, gs_ref, uw_ref, us_ref, h_ref, blk, jn, **gate_up_kw)
    arrive(sync_ref, _FIRST_COUNTER + blk, interpret=interpret)

  @pl.when(jnp.logical_not(gate_up) & used)
  def _():
    ok = counter_wait(sync_ref, _FIRST_COUNTER + blk, gate_up_programs, interpret=interpret, sleep_ns=wait_sleep_ns)
    down_block(consts_ref, bexp_ref, h_ref, dw_ref, ds_ref, y_ref, blk, jn, poison=poison_unless(ok), **down_kw)


@functools.partial(jax.jit, static_argnames=("group_size", "block_m", "block_n", "block_k", "num_warps",
                                             "num_stages", "block_n_down", "block_k_down", "planar", "exact_bf16",
                                             "wait_sleep_ns", "interpret"))
def routed_experts_int4_grouped_one_launch(x, expert_ids, expert_weights, gate_packed, gate_scale, up_packed,
                                           up_scale, down_packed, down_scale, expert_offset=0, *, group_size=32,
                                           block_m=None, block_n=None, block_k=None, num_warps=None, num_stages=None,
                                           block_n_down=None, block_k_down=None, planar=None, exact_bf16=None,
                                           wait_sleep_ns=0, interpret=False):
  """Same contract and options as pallas_triton.routed_experts_int4_pallas (stored or k-chunked arrays), except
  that one num_warps / num_stages applies to both parts (they are one kernel). wait_sleep_ns: how a down program
  polls its counter (grid_sync.counter_wait; > 0 tied at 8-16 tokens, H100). Returns [N, D] in x.dtype."""
  check_sleep_ns("routed_experts_int4_grouped_one_launch", wait_sleep_ns)
  n, d = x.shape
  e, inter, _ = logical_shape(gate_packed)
  o = grouped_options("routed_experts_int4_grouped_one_launch", x, gate_packed, gate_scale, up_packed, up_scale,
                      down_packed, down_scale, group_size=group_size, block_m=block_m, block_n=block_n,
                      block_k=block_k, num_warps=num_warps, num_stages=num_stages, block_n_down=block_n_down,
                      block_k_down=block_k_down, planar=planar, exact_bf16=exact_bf16)
  row_token, pos, is_local, block_valid, block_expert = route(expert_ids, e, expert_offset, o.block_m)
  p_pad = row_token.shape[0]
  nb = p_pad // o.block_m
  g, dn = inter // o.block_n, d // o.block_n_down
  consts = jnp.concatenate([jnp.full((1,), MAGIC, jnp.int32), jnp.zeros((nb,), jnp.int32)])
  kernel = functools.partial(_one_launch_kernel, blocks=nb, gate_up_programs=g, down_programs=dn,
                             gate_up_kw=gate_up_block_options(o, group_size, n),
                             down_kw=down_block_options(o, group_size), wait_sleep_ns=wait_sleep_ns,
                             interpret=interpret)
  _, y, _ = pl.pallas_call(
      kernel, grid=(nb * (g + dn),),
      out_shape=(jax.ShapeDtypeStruct((p_pad, inter), x.dtype), jax.ShapeDtypeStruct((p_pad, d), jnp.float32),
                 jax.ShapeDtypeStruct(consts.shape, jnp.int32)),
      input_output_aliases={0: 2},
      compiler_params=plgpu.CompilerParams(num_warps=o.num_warps, num_stages=o.num_stages),
      interpret=interpret, name="moe_int4_grouped_one_launch",
  )(consts, block_valid, block_expert, row_token, kernel_activations(x, o), gate_packed, gate_scale, up_packed,
    up_scale, down_packed, down_scale)
  return combine(y, pos, is_local, expert_weights, x.dtype)
