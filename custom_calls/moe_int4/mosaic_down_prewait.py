"""The few-token INT4 MoE's down projection in Pallas Mosaic GPU, its first expert's words loaded before its
dependent-launch wait.

Why (benchmarks/RESULTS.md, issue 6 forty-fourth round): at one token the dispatch's two gemv launches take
~16 us of kernel for a 9.6-us roofline of the call's 24.8 MB; the down kernel (8.3 MB of one K2.6 expert) cannot
start reading until the gate/up kernel has completed, because XLA puts `griddepcontrol.wait` first in every Pallas
Triton kernel. A Mosaic GPU kernel places its own wait. Here, with the gate/up kernel triggering its dependents
first (`trigger_dependents`), this kernel's programs are placed while gate/up runs, copy their tile of the first
local expert's down words and scales to shared memory (TMA), and only then wait; after the wait they read h
(written by gate/up) and do the arithmetic on the tensor cores. What remains after gate/up is that arithmetic
(~1.5-3 us estimated), not the 8.3 MB.

Reading before the wait is safe for what the kernel just before it (gate/up) does not write: gate/up triggers after
its own wait, by which every earlier kernel of the stream has completed, so the expert ids and the routing weights
are final, and the expert weights are the jit's inputs (nothing in the call writes them).

How, per program (one 64-row tile of the D outputs, grid D / 64; K2.6: 112 programs, under one an SM):
- The local pairs (token, expert) are found from the P = N * top_k expert ids in straight-line scalar code. The
  first one's whole [64, I] int4 tile and its [I/g, 64] scales go to shared memory before the wait (K2.6: 64 KB +
  8 KB).
- After the wait (`griddepcontrol.wait`; GPU only), h [TP, I] (bf16, every pair's row, TP = P rounded up to 8: the
  wgmma N side) is copied to shared memory once. Pair p's product is the wgmma of its expert's tile (dequantised in
  registers: mosaic_experts.dequant_wgmma_step) against all of h, [64, TP], of which column p is the pair's;
  it is added, times the pair's routing weight, to column p of a [64, TP] f32 sum (a select, so another column's
  unwritten h rows cannot reach it). Further local pairs stream their tiles through `emit_pipeline` (with
  `warpgroups=2`, each warpgroup takes half of every pair's K steps, and the later pairs reload the first pair's
  buffers in turn: shared memory is allocated for both warpgroups at once, so emit_pipeline cannot run per warpgroup).
- Output row tile of token t = the sum of its top_k columns, written once in x's dtype (no zero-fill, no atomics);
  a program without local pairs writes zeros.

Nothing of XLA's may run between the two kernels: XLA's kernels let their dependents start only when they exit. So
the down kernel takes only the jit's arguments (reshaped: bitcasts), h, and the gate/up kernel's planes-and-constants
array, whose offset word it reads; it converts the routing weights itself.

The down words are in the Mosaic layout (mosaic_layout.down_to_mosaic_layout: signed int4 [E, D, I], scales
[E, I/g, D]), not the Triton kernels' k-chunked one; the gate/up kernel is the Triton gemv's
(pallas_gemv.gate_up_h_matrix). Numerics: as mosaic_experts.py (weights q * scale rounded to bf16, fp32 tensor-core
sums in another order than the reference's; tolerance, not bits). Not timed on a GPU yet and not dispatched.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from custom_calls.gpu_lowering import lower_for_abstract_gpu
from custom_calls.moe_int4.mosaic_experts import ACT_TILES, GROUP_SIZES, ROWS, dequant_wgmma_step
from custom_calls.moe_int4.pallas_gemv import gate_up_h_matrix
from custom_calls.moe_int4.planes_consts import OFFSET_WORD, const_word

MAX_PAIRS = 64                 # P = N * top_k: the wgmma N side (TP) and the [64, TP] f32 sum stay small


def pair_rows(num_pairs: int) -> int:
  """TP: the rows of h the kernel reads, the P pairs rounded up to the wgmma's multiple of 8."""
  return -(-num_pairs // 8) * 8


def _down_prewait_kernel(ids, wts, xc, h, w, scale, *, num_tokens, block_k, stages, group_size,
                         wgmma_order, prewait, warpgroups, interpret):
  """out[t, r] = sum over token t's local pairs p of wts[p] * sum_k W[e_p, r, k] * h[p, k].

  ids: int32 [P] global expert ids (token-major); wts: [P] routing weights (any float dtype; products in f32);
  xc: int32 [N + R, D], the gate/up kernel's planes_consts.py array (its OFFSET_WORD is the expert offset); h: bf16
  [TP, I] (rows of remote pairs and rows >= P: any bits); w: int4 [E, D, I]; scale: bf16 [E, I/g, D]. Returns bf16
  [N, D]. Every input is one the gate/up kernel also takes or makes, so that no XLA kernel (an offset's reshape, a
  weights' convert) falls between the two and ends the dependent launch.
  prewait: copy the first local pair's tile before griddepcontrol.wait (False: after it, as a plain kernel).
  warpgroups: 1, or 2 that each take half of the K steps of every pair (two dequantisation chains in flight; their
  [64, TP] sums added through shared memory at the end; the pairs after the first load into the first pair's
  buffers, after it). Warpgroup 0 issues every copy and writes the output.
  """
  num_pairs = ids.shape[0]
  top_k = num_pairs // num_tokens
  tp = h.shape[0]
  num_local, d, inter = w.shape
  steps = inter // block_k
  half = steps // warpgroups                 # K steps a warpgroup
  groups = block_k // group_size
  wgmma = plgpu.Layout.WGMMA

  def body(ids_ref, wts_ref, xc_ref, h_ref, w_ref, s_ref, out_ref, tile_w, tile_s, act, out_smem, part_smem,
           tile_bar, act_bar, sync_bar, a_smem):
    # tile_w int4 [steps, ROWS, BK], tile_s bf16 [steps, BK/g, ROWS]: the first local pair's tile (with 2
    # warpgroups, then each later pair's in turn);
    # act bf16 [steps, TP, BK]: h; out_smem [N, ROWS]; part_smem f32 [ROWS, TP]: warpgroup 1's sums (2 warpgroups);
    # a_smem: interpret mode's A operand, one per warpgroup (None on a GPU).
    rows = pl.ds(lax.axis_index("tile") * ROWS, ROWS)
    wg = lax.axis_index("wg") if warpgroups > 1 else 0
    lead = wg == 0 if warpgroups > 1 else True                     # issues the copies, writes the output
    k0 = wg * half                                                 # this warpgroup's first K step
    base = const_word(xc_ref, num_tokens, OFFSET_WORD)
    experts = [ids_ref[p] - base for p in range(num_pairs)]                       # local ids (any value if remote)
    is_local = [(e >= 0) & (e < num_local) for e in experts]
    rank = [jnp.int32(0)]                                                         # local pairs before pair p
    for ok in is_local:
      rank.append(rank[-1] + ok.astype(jnp.int32))
    count = rank.pop()

    def nth_local(n):
      """(pair, local expert) of the local pair of rank n (< count)."""
      hit = [ok & (r == n) for ok, r in zip(is_local, rank)]
      pair = sum(jnp.where(x, jnp.int32(p), 0) for p, x in enumerate(hit))
      return pair, sum(jnp.where(x, e, 0) for x, e in zip(hit, experts))

    first_pair, first_expert = nth_local(0)

    def copy_tile(expert):
      """The [ROWS, I] words and [I/g, ROWS] scales of `expert` -> tile_w, tile_s (2 x steps arrivals, tile_bar)."""
      for j in range(steps):
        plgpu.copy_gmem_to_smem(w_ref.at[expert, rows, pl.ds(j * block_k, block_k)], tile_w.at[j], tile_bar)
        plgpu.copy_gmem_to_smem(s_ref.at[expert, pl.ds(j * groups, groups), rows], tile_s.at[j], tile_bar)

    copy_first = functools.partial(copy_tile, first_expert)

    if prewait:
      pl.when((count > 0) & lead)(copy_first)
    if not interpret:
      plgpu.griddepcontrol_wait()         # h (written by the kernel before this one) is read only after it
    if not prewait:
      pl.when((count > 0) & lead)(copy_first)

    step = functools.partial(dequant_wgmma_step, group_size=group_size, wgmma_order=wgmma_order,
                             interpret=interpret, a_smem=a_smem)
    col = plgpu.broadcasted_iota(jnp.int32, (ROWS, tp), 1, layout=wgmma)

    def add_pair(total, pair, product):
      return total + jnp.where(col == pair, product * wts_ref[pair].astype(jnp.float32), 0.0)

    def write_out(sums):
      """sums: [N] f32 [ROWS] vectors (WGMMA rows) -> out[:, rows]."""
      for t, v in enumerate(sums):
        out_smem[t] = v.astype(out_smem.dtype)
      plgpu.commit_smem()
      plgpu.copy_smem_to_gmem(out_smem, out_ref.at[:, rows])
      plgpu.wait_smem_to_gmem(0)

    @pl.when(count > 0)
    def _():
      @pl.when(lead)
      def _():
        for j in range(steps):
          plgpu.copy_gmem_to_smem(h_ref.at[:, pl.ds(j * block_k, block_k)], act.at[j], act_bar)
      plgpu.barrier_wait(act_bar)

      def resident_product(acc):
        plgpu.barrier_wait(tile_bar)
        for j in range(half):
          step(acc, tile_w.at[k0 + j], tile_s.at[k0 + j], act.at[k0 + j])
        return acc[...]

      zeros = plgpu.layout_cast(jnp.zeros((ROWS, tp), jnp.float32), wgmma)
      total = add_pair(zeros, first_pair, pl.run_scoped(resident_product, plgpu.ACC((ROWS, tp), jnp.float32)))

      def sync():
        plgpu.barrier_arrive(sync_bar)
        plgpu.barrier_wait(sync_bar)

      def next_pair(n, total):
        pair, expert = nth_local(n)

        def product(acc):
          if warpgroups > 1:
            # Shared memory is allocated for both warpgroups at once, so emit_pipeline (which allocates its
            # buffers itself) cannot run per warpgroup: the pair's whole tile replaces the previous one instead,
            # once both warpgroups are done reading it (loads and arithmetic not overlapped: a second local pair at
            # one token is the rarer case).
            sync()
            pl.when(lead)(functools.partial(copy_tile, expert))
            return resident_product(acc)
          plgpu.emit_pipeline(
              lambda idx, w_tile, s_tile: step(acc, w_tile, s_tile, act.at[k0 + idx[0]]), grid=(half,),
              in_specs=[plgpu.BlockSpec((ROWS, block_k), lambda j: (0, j)),
                        plgpu.BlockSpec((groups, ROWS), lambda j: (j, 0))],
              max_concurrent_steps=min(stages, half),
          )(w_ref.at[expert, rows, pl.ds(k0 * block_k, half * block_k)],
            s_ref.at[expert, pl.ds(k0 * groups, half * groups), rows])
          return acc[...]

        return add_pair(total, pair, pl.run_scoped(product, plgpu.ACC((ROWS, tp), jnp.float32)))

      total = lax.fori_loop(1, count, next_pair, total)
      if warpgroups > 1:
        @pl.when(wg == 1)
        def _():
          part_smem[...] = total
        sync()
        total = total + plgpu.load(part_smem, layout=wgmma)     # used by warpgroup 0 only

      @pl.when(lead)
      def _():
        write_out([jnp.sum(jnp.where((col >= t * top_k) & (col < (t + 1) * top_k), total, 0.0), axis=1)
                   for t in range(num_tokens)])

    @pl.when((count == 0) & lead)
    def _():
      write_out([plgpu.layout_cast(jnp.zeros((ROWS,), jnp.float32), wgmma.reduce(1))] * num_tokens)

  def entry(*refs):
    two = warpgroups > 1
    shared = [plgpu.SMEM((steps, ROWS, block_k), jnp.int4),
              plgpu.SMEM((steps, groups, ROWS), jnp.bfloat16),
              plgpu.SMEM((steps, tp, block_k), jnp.bfloat16, transforms=ACT_TILES),
              plgpu.SMEM((num_tokens, ROWS), jnp.bfloat16),
              *([plgpu.SMEM((ROWS, tp), jnp.float32)] if two else []),
              plgpu.Barrier(num_arrivals=2 * steps),       # tile_w and tile_s, every step
              plgpu.Barrier(num_arrivals=steps),           # h, every step
              *([plgpu.Barrier(num_arrivals=2)] if two else [])]   # both warpgroups' sums done

    if interpret:          # the A operand, one a warpgroup (registers on a GPU)
      shared.append(plgpu.SMEM((warpgroups, ROWS, block_k), jnp.bfloat16, transforms=ACT_TILES))

    def with_shared(*scr):
      tile_w, tile_s, act, out_smem, *scr = scr
      a_smem = scr.pop().at[lax.axis_index("wg") if two else 0] if interpret else None
      part_smem, tile_bar, act_bar, sync_bar = scr if two else (None, *scr, None)
      body(*refs, tile_w, tile_s, act, out_smem, part_smem, tile_bar, act_bar, sync_bar, a_smem)

    pl.run_scoped(with_shared, *shared, collective_axes="wg" if two else ())

  kernel = plgpu.kernel(
      entry, out_type=jax.ShapeDtypeStruct((num_tokens, d), jnp.bfloat16),
      grid=(d // ROWS,), grid_names=("tile",),
      **(dict(num_threads=2, thread_name="wg") if warpgroups > 1 else {}),
      interpret=plgpu.InterpretGPUParams(detect_races=True) if interpret else None)
  return kernel(ids, wts, xc, h, w, scale)


def check_options(x, expert_ids, down, down_scale, *, group_size, block_k, stages, warpgroups):
  """Raise ValueError naming the argument when the shapes or options do not fit the down kernel."""
  name = "routed_experts_int4_prewait_down"
  n, d = x.shape
  num_pairs = expert_ids.size
  e, d_w, inter = down.shape
  if x.dtype != jnp.bfloat16:
    raise ValueError(f"{name}: x is {x.dtype}; the kernels take bf16 activations")
  if num_pairs > MAX_PAIRS:
    raise ValueError(f"{name}: {n} tokens x top-{expert_ids.shape[1]} = {num_pairs} pairs; at most {MAX_PAIRS}")
  if group_size not in GROUP_SIZES:
    raise ValueError(f"{name}: group_size {group_size} not in {GROUP_SIZES}")
  if down.dtype != jnp.int4 or d_w != d:
    raise ValueError(f"{name}: down is {down.dtype} {tuple(down.shape)}, expected int4 [E, D={d}, I] "
                     "(mosaic_layout.down_to_mosaic_layout makes it)")
  if down_scale.dtype != jnp.bfloat16 or tuple(down_scale.shape) != (e, inter // group_size, d):
    raise ValueError(f"{name}: down_scale is {down_scale.dtype} {tuple(down_scale.shape)}, expected bf16 "
                     f"{(e, inter // group_size, d)}")
  if block_k % 64 or block_k % group_size or inter % block_k:
    raise ValueError(f"{name}: block_k {block_k} must be a multiple of 64 and of group_size {group_size} dividing "
                     f"I = {inter}")
  if stages < 1:
    raise ValueError(f"{name}: stages {stages} must be >= 1")
  if warpgroups not in (1, 2) or (inter // block_k) % warpgroups:
    raise ValueError(f"{name}: warpgroups {warpgroups} must be 1 or 2 and divide the {inter // block_k} K steps")
  if d % ROWS:
    raise ValueError(f"{name}: D {d} must be a multiple of {ROWS}")


@functools.partial(jax.jit, static_argnames=("group_size", "block_k", "stages", "wgmma_order", "prewait",
                                             "trigger_dependents", "warpgroups", "interpret"))
def routed_experts_int4_prewait_down(x, expert_ids, expert_weights, gate_packed, gate_scale, up_packed, up_scale,
                                     down, down_scale, expert_offset=0, *, group_size=32, block_k=256, stages=2,
                                     wgmma_order=False, prewait=True, trigger_dependents=True, warpgroups=1,
                                     interpret=False):
  """Same result as reference.routed_experts_int4_reference: the Triton gemv's gate/up kernel
  (pallas_gemv.gate_up_h_matrix), then the Mosaic down kernel above.

  x: bf16 [N, D]; expert_ids: int32 [N, K] global ids; expert_weights: [N, K]; gate/up words and scales as
  routed_experts_int4_gemv takes them (stored or k-chunked); down, down_scale: mosaic_layout.down_to_mosaic_layout's
  int4 [E, D, I] and bf16 [E, I/g, D] (with wgmma_order if made so). block_k: input columns per step of the down
  tile; stages: steps in flight for the local pairs after the first; prewait / trigger_dependents: the first pair's
  copies before the down kernel's wait, and gate/up's early trigger (both on by default; off, the two kernels run
  as plain back-to-back launches, for A/B timing); warpgroups: 1, or 2 splitting every pair's K steps in two
  (_down_prewait_kernel). expert_offset may be traced. Returns bf16 [N, D].
  """
  check_options(x, expert_ids, down, down_scale, group_size=group_size, block_k=block_k, stages=stages,
                warpgroups=warpgroups)
  n = x.shape[0]
  num_pairs = expert_ids.size
  tp = pair_rows(num_pairs)
  h, xc = gate_up_h_matrix(x, expert_ids, gate_packed, gate_scale, up_packed, up_scale, expert_offset, rows=tp,
                       group_size=group_size, trigger_dependents=trigger_dependents and not interpret,
                       interpret=interpret)                                        # bf16 [TP, I]
  return _down_prewait_kernel(expert_ids.reshape(num_pairs).astype(jnp.int32),
                              expert_weights.reshape(num_pairs), xc, h, down, down_scale,
                              num_tokens=n, block_k=block_k, stages=stages, group_size=group_size,
                              wgmma_order=wgmma_order, prewait=prewait, warpgroups=warpgroups,
                              interpret=interpret)


def lower_for_h200(num_tokens, num_local=48, d=7168, inter=2048, top_k=8, group_size=32, k_chunk=256,
                   on_mosaic_module=None, **opts):
  """jax.jit lowering of routed_experts_int4_prewait_down for CUDA at a K2.6 per-GPU shard (gate/up words k-chunked
  by k_chunk, or stored with None), without a GPU (tests); on_mosaic_module(mlir module) sees the down kernel's
  Mosaic GPU module (gpu_lowering.lower_for_abstract_gpu)."""
  sd = jax.ShapeDtypeStruct
  if k_chunk:
    words = sd((num_local, d // k_chunk, inter, k_chunk // 8), jnp.int32)
    scales = sd((num_local, d // k_chunk, inter, k_chunk // group_size), jnp.bfloat16)
  else:
    words = sd((num_local, inter, d // 8), jnp.int32)
    scales = sd((num_local, inter, d // group_size), jnp.bfloat16)
  args = (sd((num_tokens, d), jnp.bfloat16), sd((num_tokens, top_k), jnp.int32), sd((num_tokens, top_k), jnp.float32),
          words, scales, words, scales, sd((num_local, d, inter), jnp.int4),
          sd((num_local, inter // group_size, d), jnp.bfloat16))
  return lower_for_abstract_gpu(functools.partial(routed_experts_int4_prewait_down, group_size=group_size, **opts),
                                *args, on_mosaic_module=on_mosaic_module)
