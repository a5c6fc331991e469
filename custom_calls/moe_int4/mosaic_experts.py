"""INT4 routed experts for up to 16 tokens on Hopper's tensor cores (Pallas Mosaic GPU), expert by expert.

Why: at 1-16 tokens the step streams each hit expert's INT4 weights once and does almost no arithmetic per
byte. The Triton gemv (pallas_gemv.py) dequantises and multiplies on the CUDA cores, ~6 instructions per weight
(SASS, issue 6 rounds 4 and 15), so it is bound by the SMs' issue rate at 0.42-0.59 of the HBM roofline. Here the
multiply runs on the tensor cores and the dequantisation is Mosaic's int4 -> bf16 conversion (CUTLASS's
PRMT/LOP3/bf16x2-subtract): ~2.8 operations per weight in the lowered module (ldmatrix, two shuffles and two byte
permutes per 8 weights to reach the wgmma layout, the conversion, one bf16x2 scale multiply per 2 weights), 2.3
with `wgmma_order` (no shuffles), before ptxas adds address arithmetic (benchmarks/mosaic_ops_report.py). Not yet
compiled or timed on a GPU, so the model's dispatch does not use it (benchmarks/RESULTS.md, sixteenth round).

How (tokens are the wgmma's N side, so nothing is sorted or gathered):
- Every local expert that any token routes to gets a slot (`expert_slots`: the hit experts in ascending order,
  their count, and each token's routing weight per slot). A slot's expert runs on all T tokens, padded to
  TP = 8 or 16 rows (wgmma's N; a token that does not route to it gets weight 0 in the combine), so the tensor
  cores do up to TP x the useful FLOPs, which at these sizes cost nothing against the bytes.
- `_expert_matvec` kernel, grid (slot lane, 64-row tile, K split): for each of its slots (every `slot_lanes`-th
  used one; the grid is the same whether 1 or 48 experts are hit) one warpgroup streams the expert's [64, K/S] int4
  weights and [K/S/g, 64] scales through shared memory with TMA (`emit_pipeline`, `stages` steps in flight), loads
  each [64, BK] tile into registers (Mosaic's 4-bit layout, then the wgmma layout), converts it to bf16, multiplies
  by the group scales, and runs wgmma (A = the weights in registers, B = [BK, TP] activations from shared memory)
  into a [64, TP] fp32 accumulator.
- Gate/up (mosaic_layout.py's interleaved rows: a 64-row tile holds the gate and up rows of the same 32 columns
  of h) -> XLA: sum of K splits, SiLU(gate) * up, rounded to bf16 (as the reference) -> down, one slot's h per
  program -> XLA: the slots' outputs weighted per token.

Numerics: weights q * scale are rounded to bf16 exactly as the reference rounds them; products and sums fp32 on
the tensor cores; the order of the sums differs from the reference (tolerance, not bits).

Interpret mode (CPU tests) runs the same kernel body, except that the dequantised tile goes through shared memory
(interpret mode's wgmma takes its A operand from shared memory only), each step waits for its wgmma, and
`wgmma_order`'s register reinterpretation (inline Mosaic GPU) is replaced by the equivalent column permutation.
Written against jax 0.11.2's experimental Pallas Mosaic GPU API (plgpu.kernel, emit_pipeline, Layout.WGMMA_UPCAST_4X).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.mosaic import gpu as mgpu
from jax.experimental.mosaic.gpu import utils as mgpu_utils
from jax.experimental.pallas import mosaic_gpu as plgpu

from custom_calls.gpu_lowering import lower_for_abstract_gpu
from custom_calls.moe_int4.mosaic_layout import MosaicExperts, gate_up_halves

MAX_TOKENS = 16               # tokens are the wgmma N side: 8 or 16
ROWS = 64                     # output rows per program: one warpgroup's wgmma M
GROUP_SIZES = (32, 64, 128)   # a group of scales spans whole 32-column tiles of the 4-bit register layout
ACT_TILES = (plgpu.TilingTransform((8, 64)), plgpu.SwizzleTransform(128))   # bf16 [TP, BK] wgmma B tiles


def token_pad(num_tokens):
  """The wgmma N the tokens are padded to."""
  return 8 if num_tokens <= 8 else 16


def expert_slots(expert_ids, expert_weights, expert_offset, num_local, num_slots):
  """The local experts that any token routes to, in ascending order.

  expert_ids: [T, K] global ids; expert_weights: [T, K]; expert_offset: first local id (may be traced).
  Returns used: int32 [1] (how many slots hold an expert), slot_expert: int32 [num_slots] (local ids, then 0),
  slot_weight: f32 [T, num_slots] (token t's routing weight of the slot's expert; 0 on unused slots).
  """
  # Compare-and-reduce forms only (no nonzero, sort or scatter), which XLA fuses into a few small kernels.
  local = expert_ids - expert_offset                                                     # [T, K]
  hit = (local[..., None] == jnp.arange(num_local)) & ((local >= 0) & (local < num_local))[..., None]  # [T, K, E]
  present = hit.any(axis=(0, 1))                                                         # [E]
  used = present.sum(dtype=jnp.int32)
  rank = jnp.cumsum(present, dtype=jnp.int32) - 1                                        # [E]: slot of a hit expert
  in_slot = present[None, :] & (rank[None, :] == jnp.arange(num_slots)[:, None])         # [S, E], one-hot rows
  slot_expert = jnp.sum(in_slot * jnp.arange(num_local, dtype=jnp.int32), axis=1, dtype=jnp.int32)   # [S]
  weight_te = jnp.sum(hit * expert_weights.astype(jnp.float32)[..., None], axis=1)      # [T, E], f32 exactly
  slot_weight = jnp.sum(in_slot[None] * weight_te[:, None, :], axis=2)                   # [T, S]; 0 on unused slots
  return used[None], slot_expert, slot_weight


def wgmma_register_of(idx, j):
  """The wgmma-layout register that _as_wgmma_operand makes from nibble pair j (bits 8j..8j+7) of the 4-bit-layout
  register idx: 8-column tile 4 * (32-column tile) + j, the same row half (tests check it against Mosaic's layouts)."""
  return (idx[0], 4 * idx[1] + j, *idx[2:])


def _as_wgmma_operand(q):
  """int4 [64, BK] in the 4-bit load layout (WGMMA_UPCAST_4X: a thread holds 8 consecutive columns of a row in
  one 32-bit register) -> the same registers read as the wgmma layout (a thread holds columns 8j + 2c, + 1 of each
  8-column tile j, c = lane % 4), without moving data: the 2-column slice j of the register that holds stored columns
  8c..8c+7 becomes logical columns 8j + 2c, 8j + 2c + 1. So logical column 8j + 2c + b is stored column 8c + 2j + b
  of its 32-column block, which is what mosaic_layout.wgmma_column_order stores. GPU lowering only (inline_mgpu).
  Register arrays: [1, BK/32, 1, 1, 2 row halves, 1, 1, 1, 1] of vector<8xi4> -> [1, BK/8, ...] of vector<2xi4>."""
  @plgpu.inline_mgpu(arg_types=(plgpu.Layout.WGMMA_UPCAST_4X,),
                     return_type=plgpu.ShapeDtypeStruct(q.shape, q.dtype, layout=plgpu.Layout.WGMMA))
  def reinterpret(_, loaded):
    registers = np.empty(mgpu.WGMMA_LAYOUT.registers_shape(loaded.shape), dtype=object)
    for idx, reg in np.ndenumerate(loaded.registers):
      for j in range(4):
        registers[wgmma_register_of(idx, j)] = mgpu_utils.vector_slice(reg, slice(2 * j, 2 * j + 2))
    return mgpu.FragmentedArray(_registers=registers, _layout=mgpu.WGMMA_LAYOUT, _is_signed=loaded.is_signed)
  return reinterpret(q)


def _from_wgmma_column_order(a):
  """[64, BK] read in stored column order -> logical order (interpret mode's stand-in for _as_wgmma_operand)."""
  rows, bk = a.shape
  return jnp.swapaxes(a.reshape(rows, bk // 32, 4, 4, 2), 2, 3).reshape(rows, bk)


def dequant_wgmma_step(acc, w_tile, scale_tile, act_tile, *, group_size, wgmma_order, interpret, a_smem):
  """acc [ROWS, TP] f32 += (w_tile dequantised) @ act_tile^T on the tensor cores, then waits for the wgmma.

  w_tile: int4 [ROWS, BK] in shared memory (mosaic_layout.py; in `wgmma_order` if stored so); scale_tile: bf16
  [BK/g, ROWS]; act_tile: bf16 [TP, BK] (wgmma B tiles, ACT_TILES); a_smem: interpret mode's A operand (bf16
  [ROWS, BK], ACT_TILES), None on a GPU. Weights are q * scale rounded to bf16, as the reference rounds them."""
  groups = w_tile.shape[1] // group_size
  q = plgpu.load(w_tile, layout=plgpu.Layout.WGMMA_UPCAST_4X)
  if not wgmma_order:
    q = plgpu.layout_cast(q, plgpu.Layout.WGMMA)          # Mosaic moves the nibbles (shuffles, byte permutes)
  elif not interpret:
    q = _as_wgmma_operand(q)                              # no data movement: the stored order did it
  a = q.astype(jnp.bfloat16)
  if wgmma_order and interpret:
    a = _from_wgmma_column_order(a)
  row_vector = plgpu.Layout.WGMMA.reduce(1)
  s = jnp.concatenate(
      [lax.broadcast_in_dim(plgpu.load(scale_tile.at[g], layout=row_vector), (ROWS, group_size), [0])
       for g in range(groups)], axis=1)                                              # [ROWS, BK]
  a = a * s
  if interpret:
    a_smem[...] = a
    plgpu.commit_smem()
    a = a_smem
  plgpu.wgmma(acc, a, act_tile.transpose((1, 0)))
  # Wait for it before the next tile: its A operand is in registers that the next tile's conversion
  # overwrites. (Leaving one wgmma in flight, an option until session 21, gave NaN and errors of 5e2 on the
  # H200 at 4-16 tokens; benchmarks/RESULTS.md, issue 6 sixteenth round, call 4.)
  plgpu.wgmma_wait(0)


def _expert_matvec(used, slot_expert, act, w, scale, *, k_splits, slot_lanes, block_k, stages, group_size,
                   wgmma_order, interpret):
  """out[s, slot, r, t] = sum over split s's columns k of W[e, r, k] * act[t, k], e = slot_expert[slot].

  used: int32 [1]; slot_expert: int32 [S]; act: bf16 [TP, K] (every slot) or [S, TP, K] (one per slot);
  w: int4 [E, R, K]; scale: bf16 [E, K/g, R]. Returns f32 [k_splits, S, R, TP]; slots >= used are not written.
  Grid (lane, tile, split): program (l, j, s) runs tile j and split s of slots l, l + L, l + 2L, ... below used,
  one after the other (L = slot_lanes), so the grid does not grow with the slots that may be used.
  """
  num_slots = slot_expert.shape[0]
  rows_total, k = w.shape[1:]
  tp = act.shape[-2]
  per_slot_act = act.ndim == 3
  k_split = k // k_splits
  groups = block_k // group_size
  lanes = min(slot_lanes, num_slots)

  def body(used_ref, slot_expert_ref, act_ref, w_ref, scale_ref, out_ref, a_smem, out_smem):
    # a_smem [ROWS, BK] bf16: interpret mode's A operand (None on a GPU); out_smem [ROWS, TP] f32: the result's
    # staging.
    lane = lax.axis_index("lane")
    rows = pl.ds(lax.axis_index("tile") * ROWS, ROWS)
    split = lax.axis_index("split")
    cols = pl.ds(split * k_split, k_split)
    scale_rows = pl.ds(split * (k_split // group_size), k_split // group_size)

    step = functools.partial(dequant_wgmma_step, group_size=group_size, wgmma_order=wgmma_order,
                             interpret=interpret, a_smem=a_smem)

    def one_slot(i, carry):
      slot = lane + i * lanes
      e = slot_expert_ref[slot]

      def accumulate(acc):
        plgpu.emit_pipeline(
            lambda _, *tiles: step(acc, *tiles), grid=(k_split // block_k,),
            in_specs=[plgpu.BlockSpec((ROWS, block_k), lambda j: (0, j)),
                      plgpu.BlockSpec((groups, ROWS), lambda j: (j, 0)),
                      plgpu.BlockSpec((tp, block_k), lambda j: (0, j), transforms=ACT_TILES)],
            max_concurrent_steps=stages,
        )(w_ref.at[e, rows, cols], scale_ref.at[e, scale_rows, rows],
          act_ref.at[slot, :, cols] if per_slot_act else act_ref.at[:, cols])
        plgpu.wgmma_wait(0)
        return acc[...]

      out_smem[...] = pl.run_scoped(accumulate, plgpu.ACC((ROWS, tp), jnp.float32))
      plgpu.commit_smem()
      plgpu.copy_smem_to_gmem(out_smem, out_ref.at[split, slot, rows])
      plgpu.wait_smem_to_gmem(0)                  # out_smem is written again for the lane's next slot
      return carry

    mine = (jnp.maximum(used_ref[0] - lane, 0) + lanes - 1) // lanes
    lax.fori_loop(0, mine, one_slot, 0)

  def entry(*refs):
    # interpret mode's A operand (the GPU keeps it in registers, so the 32 KB are not allocated there)
    a_tile = plgpu.SMEM((ROWS, block_k), jnp.bfloat16, transforms=ACT_TILES) if interpret else None
    pl.run_scoped(lambda out_smem, a_smem=None: body(*refs, a_smem, out_smem),
                  plgpu.SMEM((ROWS, tp), jnp.float32), *([a_tile] if interpret else []))

  kernel = plgpu.kernel(
      entry, out_type=jax.ShapeDtypeStruct((k_splits, num_slots, rows_total, tp), jnp.float32),
      grid=(lanes, rows_total // ROWS, k_splits), grid_names=("lane", "tile", "split"),
      interpret=plgpu.InterpretGPUParams(detect_races=True) if interpret else None)
  return kernel(used, slot_expert, act, w, scale)


def default_options(d, inter):
  """(block_k, k_splits, k_splits_down) for D inputs of gate/up and I of down: steps of 256 columns where they
  divide, gate/up split in two (K2.6: 64 tiles x 2 = 128 programs for one expert, about one per SM), down unsplit
  (112 tiles). Not yet tuned on a GPU."""
  block_k = next((b for b in (256, 128, 64) if d % b == 0 and inter % b == 0), 64)   # 64: check_options says why
  return block_k, (2 if d % (2 * block_k) == 0 else 1), 1


def check_options(x, experts: MosaicExperts, *, group_size, block_k, stages, k_splits, k_splits_down):
  """Raise ValueError naming the argument when the shapes or options do not fit the kernels."""
  t, d = x.shape
  e, two_i, d_w = experts.gate_up.shape
  inter = two_i // 2
  if x.dtype != jnp.bfloat16:
    raise ValueError(f"mosaic_experts: x is {x.dtype}; the kernels take bf16 activations")
  if not 1 <= t <= MAX_TOKENS:
    raise ValueError(f"mosaic_experts: {t} tokens; the expert-by-expert kernels take 1..{MAX_TOKENS}")
  if group_size not in GROUP_SIZES:
    raise ValueError(f"mosaic_experts: group_size {group_size} not in {GROUP_SIZES}")
  want = {"gate_up": (experts.gate_up, (e, two_i, d), jnp.int4),
          "gate_up_scale": (experts.gate_up_scale, (e, d // group_size, two_i), jnp.bfloat16),
          "down": (experts.down, (e, d, inter), jnp.int4),
          "down_scale": (experts.down_scale, (e, inter // group_size, d), jnp.bfloat16)}
  for name, (arr, shape, dtype) in want.items():
    if tuple(arr.shape) != shape or arr.dtype != dtype:
      raise ValueError(f"mosaic_experts: {name} is {arr.dtype} {tuple(arr.shape)}, expected {jnp.dtype(dtype)} "
                       f"{shape} (x {x.shape}; mosaic_layout.to_mosaic_layout makes them)")
  if block_k % 64 or block_k % group_size:
    raise ValueError(f"mosaic_experts: block_k {block_k} must be a multiple of 64 and of group_size {group_size}")
  if stages < 1:
    raise ValueError(f"mosaic_experts: stages {stages} must be >= 1")
  for name, splits, length in (("k_splits", k_splits, d), ("k_splits_down", k_splits_down, inter)):
    if splits < 1 or length % (splits * block_k):
      raise ValueError(f"mosaic_experts: {name} {splits} x block_k {block_k} must divide the {length} inputs")
  if two_i % ROWS or d % ROWS:
    raise ValueError(f"mosaic_experts: 2I {two_i} and D {d} must be multiples of {ROWS}")


@functools.partial(jax.jit, static_argnames=("group_size", "block_k", "stages", "k_splits", "k_splits_down",
                                             "slot_lanes", "wgmma_order", "interpret"))
def routed_experts_int4_mosaic(x, expert_ids, expert_weights, experts: MosaicExperts, expert_offset=0, *,
                               group_size=32, block_k=None, stages=4, k_splits=None, k_splits_down=None,
                               slot_lanes=None, wgmma_order=False, interpret=False):
  """Same result as reference.routed_experts_int4_reference, from the arrays of mosaic_layout.to_mosaic_layout.

  x: bf16 [T, D], T <= 16; expert_ids: int32 [T, K] global ids; expert_weights: [T, K]; expert_offset may be
  traced (shard_map). block_k: input columns per pipeline step; stages: steps whose copies are in flight;
  k_splits / k_splits_down: programs that share one 64-row tile of gate/up / down, each over 1/S of the inputs
  (more programs at one expert: gate/up of one K2.6 expert is 64 tiles, down 112); slot_lanes: programs that
  share a tile and split, each running every slot_lanes-th used slot (at most the slots; default min(4, T): on an
  expert-parallel shard a token hits about one local expert, so T lanes leave few programs idle); wgmma_order: the
  experts were made with to_mosaic_layout(wgmma_order=True), so a loaded tile is the wgmma operand as it is.
  block_k / k_splits / k_splits_down None: default_options. Returns [T, D] bf16.
  """
  defaults = default_options(x.shape[1], experts.down.shape[2])
  block_k = defaults[0] if block_k is None else block_k
  k_splits = defaults[1] if k_splits is None else k_splits
  k_splits_down = defaults[2] if k_splits_down is None else k_splits_down
  check_options(x, experts, group_size=group_size, block_k=block_k, stages=stages, k_splits=k_splits,
                k_splits_down=k_splits_down)
  slot_lanes = min(4, x.shape[0]) if slot_lanes is None else slot_lanes
  if slot_lanes < 1:
    raise ValueError(f"mosaic_experts: slot_lanes {slot_lanes} must be >= 1")
  t, d = x.shape
  num_local = experts.gate_up.shape[0]
  num_slots = min(t * expert_ids.shape[1], num_local)
  tp = token_pad(t)
  used, slot_expert, slot_weight = expert_slots(expert_ids, expert_weights, expert_offset, num_local, num_slots)
  live = (jnp.arange(num_slots) < used[0])[:, None, None]                    # [S, 1, 1]
  x_pad = jnp.pad(x, ((0, tp - t), (0, 0)))                                  # [TP, D]
  opts = dict(block_k=block_k, stages=stages, group_size=group_size, slot_lanes=slot_lanes,
              wgmma_order=wgmma_order, interpret=interpret)
  gate_up = _expert_matvec(used, slot_expert, x_pad, experts.gate_up, experts.gate_up_scale, k_splits=k_splits,
                           **opts).sum(axis=0)                               # [S, 2I, TP]
  gate, up = gate_up_halves(jnp.where(live, gate_up, 0.0))                   # [S, I, TP] each
  h = jnp.swapaxes(jax.nn.silu(gate) * up, 1, 2).astype(jnp.bfloat16)       # [S, TP, I]
  y = _expert_matvec(used, slot_expert, h, experts.down, experts.down_scale, k_splits=k_splits_down,
                     **opts).sum(axis=0)                                     # [S, D, TP]
  y = jnp.where(live, y, 0.0)[:, :, :t]                                      # [S, D, T]
  return jnp.sum(y * slot_weight.T[:, None, :], axis=0).T.astype(x.dtype)     # f32 products and sums


def lower_for_h200(num_tokens, num_local=48, d=7168, inter=2048, top_k=8, group_size=32, on_mosaic_module=None,
                   **opts):
  """jax.jit lowering of routed_experts_int4_mosaic for CUDA at a K2.6 per-GPU shard, without a GPU (tests);
  on_mosaic_module(mlir module) sees each kernel's Mosaic GPU module (gpu_lowering.lower_for_abstract_gpu)."""
  sd = jax.ShapeDtypeStruct
  experts = MosaicExperts(sd((num_local, 2 * inter, d), jnp.int4),
                          sd((num_local, d // group_size, 2 * inter), jnp.bfloat16),
                          sd((num_local, d, inter), jnp.int4), sd((num_local, inter // group_size, d), jnp.bfloat16))
  args = (sd((num_tokens, d), jnp.bfloat16), sd((num_tokens, top_k), jnp.int32), sd((num_tokens, top_k), jnp.float32),
          experts)
  return lower_for_abstract_gpu(functools.partial(routed_experts_int4_mosaic, group_size=group_size, **opts), *args,
                                on_mosaic_module=on_mosaic_module)
