"""Absorbed-MLA tree attention as a Pallas Mosaic GPU kernel (Hopper, FlashMLA-style "seesaw" layout).

Status: dispatched by custom_calls.mla_attention (impl "auto") on GPUs for 64 query rows (T x H) or more: trees,
blocks and 64-head decode, except 64-128 rows in the batch over at most 4K keys, 12K at 64 rows
(pallas_triton.is_short_wide_decode: the Triton kernel is 2-39% faster there, issue 6 rounds 40-41).
H200 (benchmarks/RESULTS.md, issue 6 ninth round): 0.62-0.91 of the roofline on the compute-bound trees (up to
641 TFLOP/s), against the Triton kernel's 0.28-0.35; 64-head decode 0.83 at 128K (Triton: 0.50). A decode at
<= 32K costs ~11 us of fixed latency in this kernel alone.
Same contract as reference.mla_attention_reference; the split-K + log-sum-exp combine is split_combine.py.
Registers: 241 a thread, no spills (the 64 x 256 fp32 accumulator half is 128 of them). Every shared-memory index
of the key loop goes through a zero read from memory (_opaque_zero): with static indices LLVM hoisted the wgmma
descriptors out of the loop and ptxas spilled them (255 registers, 560 bytes of stack, about 1.5x slower).

Design. One CTA = one sequence b, one tile of BM = 64 query rows (row m = t*H + h, rows padded to a multiple
of 64 with zeros) and one key split j. Two compute warpgroups (WG0, WG1) share the CTA; the 64x512 fp32
output accumulator is split between them by columns: WG w owns o[:, 256w:256(w+1)] (64x256 fp32 = 128
registers a thread). Keys are processed in pairs of BN = 64 key blocks: WG0 computes the scores of the even
block (kv slot 0), WG1 those of the odd block (kv slot 1), and both multiply both P tiles into their own half
of the output:

  WG0: S0 = Q K0^T; m0 = max(m, rowmax S0); P0 = exp2(S0 - m0); (m0, sc0) and P0 (bf16) -> smem; arrive s0
       O0 = O0*sc0 + P0 V0[:, :256]                        (P0 from registers)
       wait s1; O0 = O0*sc1 + P1 V1[:, :256]               (P1 from smem)
  WG1: S1 = Q K1^T; wait s0; m1 = max(m0, rowmax S1); P1 = exp2(S1 - m1); (sc1, m1) and P1 -> smem; arrive s1
       O1 = O1*sc0 + P0 V0[:, 256:]                        (P0 from smem)
       O1 = O1*sc1 + P1 V1[:, 256:]                        (P1 from registers)
Both halves end the pair as (O*sc0 + P0 V0)*sc1 + P1 V1 in units of m1. P0 is shared unscaled and WG1 applies
sc1 to its accumulator, so neither warpgroup keeps an fp32 P tile alive across a product. The row sums l are
kept per warpgroup (each rescaled like its own O half) and added at the end. Scores are in log2 units
(scale * log2(e) folded in) and exp2 is used; the running max starts at a finite -1e30 so that fully masked
rows never compute inf - inf.

Refills. Each kv slot holds two 64x256 ckv halves, the 64x64 kpe tile and the 2x64 int32 mask words; their 4
TMA copies arrive on the slot's barrier k_bar[slot]. A piece is refilled with the next pair's block by its
last reader, right after its last use (products wait for their wgmma before returning):
  slot 0 half 0, kpe 0, mask 0: read only by WG0 (Q K0^T, P0 V0[:, :256]) -> WG0 after its P0 V0;
  slot 0 half 1: WG0's Q K0^T (done before s0) and WG1's P0 V0[:, 256:] -> WG1 after that product;
  slot 1 half 0: WG1's Q K1^T (done before s1) and WG0's P1 V1[:, :256] -> WG0 after that product;
  slot 1 half 1, kpe 1, mask 1: read only by WG1 -> WG1 after its P1 V1.
The shared P0 tile and (m0, sc0) are rewritten by WG0 for pair i+1 only after it waited k_bar[0] for that pair,
which completes only after WG1 issued its slot 0 half 1 refill, i.e. after WG1 read (m0, sc0) and finished its
P0 V0 of pair i. P1 and (sc1, m1) are rewritten by WG1 only after waiting s0 of pair i+1, which WG0 arrives
after its P1 V1 of pair i. No other barriers are needed.

Visibility (as reference.py): key s is visible to query t iff s < cache_len[b], or 0 <= s - cache_len[b] < T
and block_mask[b, t, s - cache_len[b]]; keys past cache_len[b] + T never are. The visible range is covered by
pairs [0, p_end), p_end = cdiv(min(cache_len + T, S), 128); pairs before p_mid = cache_len // 128 lie in the
committed context and run without a mask (first loop), pairs [p_mid, p_end) gather the mask (second loop;
keys of the last pair past cache_len + T are masked out). The mask of the masked pairs is precomputed in XLA
as bits: for key block k of the tail (key base = 128 * (cache_len // 128)) and row m, two int32 words hold the
visibility of the block's keys 0..31 and 32..63 (`mask_words`: [B, NTB, 2, Mpad]; the committed blocks load
tile 0 too, but their steps do not apply a mask). In the kernel each warpgroup
loads its row's two words in the row layout, broadcasts them and extracts bit (col & 31) of the word chosen
by col < 32. Split-K: the pairs [0, p_end) are cut into num_splits contiguous parts on the device (from the
dynamic length); each CTA writes its normalised partial output (bf16 by default, `partial_dtype`) and its natural
log-sum-exp (-inf for an empty split or a fully masked row, whose partial output is 0); split_combine.py
combines the splits (one more kernel).
With one split the kernel's output is the result and there is no combine.

Shapes (B batch, T query tokens, H heads, S cache slots, M = T*H rows, Mpad = 64*cdiv(M, 64), NS splits):
  q_lat [B,T,H,512] -> [B,Mpad,512]   q_pe [B,T,H,64] -> [B,Mpad,64]   ckv [B,S,512]   kpe [B,S,64]
  cache_len [B] i32   mask_words [B,NTB,2,Mpad] i32
  zero [1] i32 (_opaque_zero)
  outputs: o_part [B,NS,Mpad,512] partial_dtype, lse [B,NS,Mpad] f32 -> combined o [B,T,H,512] in q_lat.dtype.

Shared memory (GPU path, bytes): Q latent 2x64x256 bf16 = 65536; kv slots 2 x (2x64x256) bf16 = 131072 plus
kpe 2x64x64 bf16 = 16384, the same 147456 bytes reused at the end for the output staging (2x64x256, bf16 65536
or f32 131072 bytes, a RefUnion); q_pe 64x64 bf16 = 8192, reused for P1 once both warpgroups hold q_pe in
registers (a RefUnion); P0 64x64 bf16 = 8192; mask words 2x2x64 i32 = 1024; row vectors 4x64 f32 = 1024;
7 mbarriers = 56. Total 231480 bytes, against the 232448-byte (227 KiB) opt-in limit of sm_90: it only fits with
CompilerParams(reduction_scratch_bytes=0) (the default reserves 2048 bytes of reduction scratch and overflows;
the kernel's row reductions are warp-local and need none). There is no room for a deeper kv pipeline, and one
CTA fills an SM.

Interpret mode (interpret=True, CPU) runs the same kernel body with the differences interpret mode requires:
its wgmma accepts only shared-memory LHS operands, so q_pe stays in its own buffer (no union with P1) and each
warpgroup reads its own P tile from the smem copy it has just written for the other one; and
`pl.run_state(ACC.init(o))` is not supported, so each P V product goes into a fresh accumulator and is added
to o in registers. Interpret mode does NOT exercise: register-operand wgmma and in-place accumulation, the
shared-memory budget and the RefUnion aliasing of the GPU path, the real layouts / swizzles / TMA descriptors,
approximate math (approx_math=True: exp2/divide differ slightly on a GPU), or any performance aspect. Its race
detector (detect_races=True, always on here) catches races on plain shared-memory loads/stores between the
warpgroups (dropping the s1 barrier is flagged), but wgmma operand reads versus TMA writes are apparently not
tracked (a deliberately removed slot barrier of an earlier version went unflagged), so the refill protocol
above is verified by reasoning and by the GPU tests only. Interpret mode runs the warpgroups as threads whose
nested CPU programs block in host callbacks (the barriers) while holding threads of XLA's CPU intra-op pool; on a
machine with few cores that pool starves and the kernel deadlocks now and then (2 cores, session 9). Call
`reserve_cpu_threads_for_interpret()` before JAX's CPU client starts (tests/conftest.py does) and wait for the
result before other work.

Private JAX APIs: none in this module (interpret mode goes through plgpu.kernel(interpret=InterpretGPUParams)
and a CPU run traces under jax.sharding.use_abstract_mesh(gpu_lowering.abstract_gpu_mesh()), as the CUDA
lowering test does). The Mosaic GPU Pallas API itself (plgpu.kernel, RefUnion, wgmma, Layout.WGMMA, run_state on ACC) is
experimental and changes between JAX versions; written against jax 0.11.2. The tests read the interpret-mode
race detector through the private jax._src.pallas.mosaic_gpu.interpret.gpu_callbacks.get_races().

Public function: `mla_attention_mosaic(q_lat, q_pe, ckv, kpe, cache_len, block_mask, *, scale, ...)`.
"""
from __future__ import annotations

import contextlib
import functools
import math
import os

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from custom_calls.gpu_lowering import abstract_gpu_mesh
from custom_calls.mla_attention.split_combine import check_combine, combine_partials

BM = 64          # query rows per CTA
BN = 64          # keys per block (two blocks, one per warpgroup, per pair)
PAIR = 2 * BN
R = 512          # kv_lora_rank
P = 64           # qk_rope_head_dim
HALF = R // 2    # output columns per warpgroup
_NEG_INIT = -1e30
_LOG2E = math.log2(math.e)
_LN2 = math.log(2.0)
_NUM_SMS = 132

_TILE_BF16 = (plgpu.TilingTransform((8, 64)), plgpu.SwizzleTransform(128))
_TILE_F32 = (plgpu.TilingTransform((8, 32)), plgpu.SwizzleTransform(128))


INTERPRET_MIN_CPU_THREADS = 8   # XLA CPU intra-op threads interpret mode needs (module docstring)


def reserve_cpu_threads_for_interpret():
  """On a machine with fewer than INTERPRET_MIN_CPU_THREADS cores, sizes XLA's CPU intra-op pool to that many
  threads (PJRT_NPROC, read by the PJRT CPU client when it starts), so that interpret mode's warpgroup threads
  cannot starve it. Effective only before the CPU client starts (the first computation or jax.devices()); an
  explicit PJRT_NPROC is kept."""
  if "PJRT_NPROC" not in os.environ and (os.cpu_count() or 1) < INTERPRET_MIN_CPU_THREADS:
    os.environ["PJRT_NPROC"] = str(INTERPRET_MIN_CPU_THREADS)


def default_num_splits(batch, num_rows, num_keys, num_sms=_NUM_SMS):
  """At most one wave of CTAs (one per SM: the kernel takes all of an SM's shared memory), at least one key-block
  pair per split. H100, issue 6 round 37, kernel time at 1 x 1 x 64 heads: 8K 16.0 us at one pair a split (64
  splits) against 17.6 at two (32), the rule until then; 4K 14.2 at 32 against 16.0 at 16; at 32K 128 splits of
  two pairs stay (29.8 against 31.5 at 64). H200, issue 6 seventh round: 8 x 16 x 64 heads x 4K (128 tiles)
  0.211 ms unsplit against 0.235 at 2 splits; 1 x 257 x 8 x 32K (33 tiles) 0.375 at 4 against 0.655 at 2 and 0.402 at 8;
  1 x 64 x 8 x 32K (8 tiles) 0.129 at 17 against 0.188 at 8 and 0.146 at 34; 1 x 1 x 64 x 128K 0.097 at 132
  against 0.120 at 66 and 0.118 at 264."""
  programs = batch * pl.cdiv(num_rows, BM)
  max_splits = max(1, num_keys // PAIR)
  return int(max(1, min(num_sms // programs, max_splits)))


def device_supported():
  """Whether this process's GPUs are Hopper (sm_90: wgmma and TMA as this kernel uses them); False on CPUs."""
  devices = jax.local_devices()
  return bool(devices) and all(d.platform == "gpu" and str(getattr(d, "compute_capability", "")).startswith("9.")
                               for d in devices)


def supported(q_lat, q_pe, ckv, kpe, cache_len=None, block_mask=None):
  """Shapes and dtypes the kernel handles: K2.6's R 512 and P 64, bf16, S a multiple of 128."""
  return (q_lat.ndim == 4 and q_lat.shape[-1] == R and q_pe.shape[-1] == P and ckv.shape[-1] == R
          and kpe.shape[-1] == P and ckv.shape[1] % PAIR == 0 and ckv.shape[1] > 0
          and all(x.dtype == jnp.bfloat16 for x in (q_lat, q_pe, ckv, kpe)))


def _mask_words(cache_len, block_mask, num_heads, num_rows_pad, num_keys):
  """Packed visibility of the tail key blocks -> [B, NTB, 2, Mpad] int32: bit i of word [b, k, w, m] is key
  128 * (cache_len[b] // 128) + 64k + 32w + i for row m. Built in that order (keys before rows), so that XLA
  makes one reduction of it, without a transpose or a concatenate after it."""
  bsz, t, _ = block_mask.shape
  ntp = pl.cdiv(PAIR - 1 + t, PAIR)                                # most masked pairs of one sequence
  kt = ntp * PAIR                                                  # tail keys covered
  base = (cache_len // PAIR) * PAIR                                # [B] first key of the first masked pair
  keys = base[:, None] + jnp.arange(kt, dtype=jnp.int32)[None, :]  # [B, KT]
  rel = keys - cache_len[:, None]                                  # [B, KT]
  in_block = (rel >= 0) & (rel < t)
  rel_c = jnp.clip(rel, 0, t - 1)
  tree = jnp.take_along_axis(block_mask.transpose(0, 2, 1), jnp.broadcast_to(rel_c[:, :, None], (bsz, kt, t)),
                             axis=1)                               # [B, KT, T]: tree[b, k, t] = mask[b, t, rel]
  vis = ((keys < cache_len[:, None])[:, :, None] | (in_block[:, :, None] & tree)) & (keys < num_keys)[:, :, None]
  rows = jnp.arange(num_rows_pad)
  row_t = jnp.minimum(rows // num_heads, t - 1)
  vis = vis[:, :, row_t] & (rows < t * num_heads)[None, None, :]  # [B, KT, Mpad]; padding rows: nothing
  bits = vis.reshape(bsz, 2 * ntp, 2, 32, num_rows_pad).astype(jnp.uint32)
  shifts = jnp.arange(32, dtype=jnp.uint32)[:, None]
  words = jnp.sum(bits << shifts, axis=3, dtype=jnp.uint32)       # [B, NTB, 2, Mpad]
  return lax.bitcast_convert_type(words, jnp.int32)


def _build_kernel(*, bsz, num_q, num_rows_pad, num_keys, num_splits, scale, dtype, interp, partial_dtype,
                  trigger_dependents=False):
  """partial_dtype: dtype of the per-split outputs (with one split, the normalised output itself);
  trigger_dependents: issue griddepcontrol.launch_dependents first (GPU only; see mla_attention_mosaic)."""
  c = float(scale) * _LOG2E
  L = plgpu.Layout.WGMMA
  ROW = plgpu.Layout.WGMMA.reduce(1)
  num_row_tiles = num_rows_pad // BM
  part_bf16 = jnp.dtype(partial_dtype) == jnp.bfloat16

  def body(cl_ref, q_ref, qpe_ref, ckv_ref, kpe_ref, mw_ref, zero_ref, o_ref, lse_ref,
           q_s, qpe_p1, p0_s, kv_o, mw_s, vec_s, q_bar, qpe_bar, k_bar, s0_bar, s1_bar, sync_bar):
    # q_s [2,BM,256] bf16; qpe_p1 = ((qpe_s [BM,P],), (p1_s [1,BM,BN],)); p0_s [1,BM,BN] bf16;
    # kv_o = ((kv_s [2 slot,2 half,BN,256] bf16, kpe_s [2 slot,BN,P] bf16), (o_s [2,BM,256] partial_dtype,));
    # mw_s [2 slot,2,BM] i32; vec_s [4,BM] f32 (m0, sc0, sc1, m1; at the end l0, l1, lse).
    (qpe_s,), (p1_s,) = qpe_p1
    (kv_s, kpe_s), (o_s,) = kv_o
    if trigger_dependents and not interp:   # the interpreter has no rule for it (and launches nothing early)
      plgpu.griddepcontrol_launch_dependents()
    mt = lax.axis_index("m")
    j = lax.axis_index("j")
    b = lax.axis_index("b")
    w = lax.axis_index("wg")
    rows = pl.ds(mt * BM, BM)

    cache_len = cl_ref[b]
    kv_end = jnp.minimum(cache_len + num_q, num_keys)
    p_end = (kv_end + PAIR - 1) // PAIR
    per_split = (p_end + num_splits - 1) // num_splits
    p_lo = jnp.minimum(j * per_split, p_end)
    p_hi = jnp.minimum(p_lo + per_split, p_end)
    tail_pair = cache_len // PAIR
    p_mid = jnp.clip(tail_pair, p_lo, p_hi)

    def load_half(blk, slot, h):
      """ckv[blk's 64 keys, columns 256h : 256(h+1)] -> kv_s[slot, h] (one of the slot's 4 arrivals)."""
      plgpu.copy_gmem_to_smem(ckv_ref.at[b, pl.ds(blk * BN, BN), pl.ds(h * HALF, HALF)], kv_s.at[slot, h],
                              k_bar.at[slot])

    def load_score_extras(blk, slot):
      """kpe of blk and its mask words (used by the slot's Q K^T only): 2 of the slot's 4 arrivals."""
      plgpu.copy_gmem_to_smem(kpe_ref.at[b, pl.ds(blk * BN, BN)], kpe_s.at[slot], k_bar.at[slot])
      tile = jnp.maximum(blk - 2 * tail_pair, 0)                   # committed blocks: any tile (unused)
      plgpu.copy_gmem_to_smem(mw_ref.at[b, tile, :, rows], mw_s.at[slot], k_bar.at[slot])

    def load_block(blk, slot):
      for h in range(2):
        load_half(blk, slot, h)
      load_score_extras(blk, slot)

    @pl.when(w == 0)
    def _prologue():
      for h in range(2):
        plgpu.copy_gmem_to_smem(q_ref.at[b, rows, pl.ds(h * HALF, HALF)], q_s.at[h], q_bar)
      plgpu.copy_gmem_to_smem(qpe_ref.at[b, rows], qpe_s, qpe_bar)

      @pl.when(p_lo < p_hi)
      def _():
        load_block(2 * p_lo, 0)
        load_block(2 * p_lo + 1, 1)

    plgpu.barrier_wait(q_bar)
    plgpu.barrier_wait(qpe_bar)
    qpe = qpe_s if interp else plgpu.load(qpe_s, layout=L)    # [BM, P]; GPU: kept in registers

    def sync():
      plgpu.barrier_arrive(sync_bar)
      plgpu.barrier_wait(sync_bar)

    sync()   # GPU: both warpgroups hold q_pe in registers before P1 reuses its buffer

    def qk(slot, masked):
      def f(acc):
        z = zero_ref[0]                                            # see _opaque_zero
        for h in range(2):
          plgpu.wgmma(acc, q_s.at[h + z], kv_s.at[slot + z, h].transpose((1, 0)))
        plgpu.wgmma(acc, qpe, kpe_s.at[slot + z].transpose((1, 0)))
        return acc[...]
      s = pl.run_scoped(f, plgpu.ACC((BM, BN), jnp.float32)) * c   # [BM, BN] log2 units
      if masked:
        lo = lax.broadcast_in_dim(plgpu.load(mw_s.at[slot, 0], layout=ROW), (BM, BN), [0])
        hi = lax.broadcast_in_dim(plgpu.load(mw_s.at[slot, 1], layout=ROW), (BM, BN), [0])
        col = plgpu.layout_cast(lax.broadcasted_iota(jnp.int32, (BM, BN), 1), L)
        word = jnp.where(col < 32, lo, hi)
        bit = lax.shift_right_logical(word, col & 31) & 1
        s = jnp.where(bit != 0, s, -jnp.inf)
      return s

    def pv(o, p, slot, half):
      """o [BM,256] f32 += p [BM,BN] @ V[slot][:, 256*half : 256*(half+1)]; p: registers, or p0_s / p1_s."""
      p_in_smem = any(p is tile for tile in (p0_s, p1_s))          # [1, BM, BN], indexed like every operand

      def product(acc):
        z = zero_ref[0]                                            # see _opaque_zero
        plgpu.wgmma(acc, p.at[z] if p_in_smem else p, kv_s.at[slot + z, half])
      if interp:
        def g(acc):
          product(acc)
          return acc[...]
        return o + pl.run_scoped(g, plgpu.ACC((BM, HALF), jnp.float32))
      return pl.run_state(product)(plgpu.ACC.init(o))

    bc = lambda x: lax.broadcast_in_dim(x, (BM, HALF), [0])
    bs = lambda x: lax.broadcast_in_dim(x, (BM, BN), [0])

    def step_wg0(i, carry, masked):
      o, m, l = carry
      plgpu.barrier_wait(k_bar.at[0])
      s = qk(0, masked)
      m_new = jnp.maximum(m, s.max(axis=1))
      sc0 = jnp.exp2(m - m_new)
      p = jnp.exp2(s - bs(m_new))
      l = l * sc0 + p.sum(axis=1)
      pb = p.astype(dtype)                                         # the f32 P dies here
      vec_s[0] = m_new
      vec_s[1] = sc0
      p0_s[0] = pb
      plgpu.commit_smem()
      plgpu.barrier_arrive(s0_bar)                                 # (m0, sc0) and the unscaled P0 are ready
      o = pv(o * bc(sc0), p0_s if interp else pb, 0, 0)            # O0 = O0 sc0 + P0 V0[:, :256]
      more = i + 1 < p_hi

      @pl.when(more)
      def _():                                                     # WG0 was the last reader of these
        load_half(2 * i + 2, 0, 0)
        load_score_extras(2 * i + 2, 0)
      plgpu.barrier_wait(s1_bar)
      sc1 = vec_s[2]
      m1 = vec_s[3]
      o = pv(o * bc(sc1), p1_s, 1, 0)                              # O0 = O0 sc1 + P1 V1[:, :256]
      l = l * sc1

      @pl.when(more)
      def _():                                                     # WG1's Q K1^T was done before s1
        load_half(2 * i + 3, 1, 0)
      return o, m1, l

    def step_wg1(i, carry, masked):
      o, _, l = carry
      plgpu.barrier_wait(k_bar.at[1])
      s = qk(1, masked)
      plgpu.barrier_wait(s0_bar)
      m0 = vec_s[0]
      sc0 = vec_s[1]
      m_new = jnp.maximum(m0, s.max(axis=1))
      sc1 = jnp.exp2(m0 - m_new)
      p = jnp.exp2(s - bs(m_new))
      l = l * (sc0 * sc1) + p.sum(axis=1)
      pb = p.astype(dtype)
      p1_s[0] = pb
      vec_s[2] = sc1
      vec_s[3] = m_new
      plgpu.commit_smem()
      plgpu.barrier_arrive(s1_bar)
      o = pv(o * bc(sc0), p0_s, 0, 1)                              # O1 = O1 sc0 + P0 V0[:, 256:]
      more = i + 1 < p_hi

      @pl.when(more)
      def _():                                                     # WG0's Q K0^T was done before s0
        load_half(2 * i + 2, 0, 1)
      o = pv(o * bc(sc1), p1_s if interp else pb, 1, 1)            # O1 = O1 sc1 + P1 V1[:, 256:]

      @pl.when(more)
      def _():
        load_half(2 * i + 3, 1, 1)
        load_score_extras(2 * i + 3, 1)
      return o, m_new, l

    def run(step, wg):
      o = plgpu.layout_cast(jnp.zeros((BM, HALF), jnp.float32), L)
      m = plgpu.layout_cast(jnp.full((BM,), _NEG_INIT, jnp.float32), ROW)
      l = plgpu.layout_cast(jnp.zeros((BM,), jnp.float32), ROW)
      carry = lax.fori_loop(p_lo, p_mid, functools.partial(step, masked=False), (o, m, l))
      o, m, l = lax.fori_loop(p_mid, p_hi, functools.partial(step, masked=True), carry)

      sync()                                   # both warpgroups are done with every kv slot and P tile
      vec_s[wg] = l                             # rows 0..3 (m0, sc0, sc1, m1) are free again
      sync()
      l_tot = vec_s[0] + vec_s[1]
      ok = l_tot > 0
      l_safe = jnp.where(ok, l_tot, 1.0)
      o_s[wg] = (o / bc(l_safe)).astype(partial_dtype)
      plgpu.commit_smem()
      plgpu.copy_smem_to_gmem(o_s.at[wg], o_ref.at[b, j, rows, pl.ds(wg * HALF, HALF)])
      if wg == 0:
        vec_s[2] = jnp.where(ok, m * _LN2 + jnp.log(l_safe), -jnp.inf)
        plgpu.commit_smem()
        plgpu.copy_smem_to_gmem(vec_s.at[2], lse_ref.at[b, j, rows])
      plgpu.wait_smem_to_gmem(0)

    pl.when(w == 0)(lambda: run(step_wg0, 0))
    pl.when(w == 1)(lambda: run(step_wg1, 1))

  def scratch():
    q_s = plgpu.SMEM((2, BM, HALF), dtype, transforms=_TILE_BF16)
    qpe = [plgpu.SMEM((BM, P), dtype, transforms=_TILE_BF16)]
    p1 = [plgpu.SMEM((1, BM, BN), dtype, transforms=_TILE_BF16)]
    p0 = plgpu.SMEM((1, BM, BN), dtype, transforms=_TILE_BF16)
    kv = [plgpu.SMEM((2, 2, BN, HALF), dtype, transforms=_TILE_BF16),
          plgpu.SMEM((2, BN, P), dtype, transforms=_TILE_BF16)]
    o_stage = [plgpu.SMEM((2, BM, HALF), partial_dtype, transforms=_TILE_BF16 if part_bf16 else _TILE_F32)]
    mw = plgpu.SMEM((2, 2, BM), jnp.int32)
    vec = plgpu.SMEM((4, BM), jnp.float32)
    if interp:   # no aliasing: q_pe stays an smem operand
      qpe_p1, kv_o = (qpe, p1), (kv, o_stage)
    else:
      qpe_p1, kv_o = plgpu.RefUnion(qpe, p1), plgpu.RefUnion(kv, o_stage)
    barriers = (
        plgpu.Barrier(num_arrivals=2),                   # q_bar: two Q halves
        plgpu.Barrier(num_arrivals=1),                   # qpe_bar
        plgpu.Barrier(num_arrivals=4, num_barriers=2),   # k_bar per slot: ckv halves, kpe, mask words
        plgpu.Barrier(num_arrivals=1),                   # s0: WG0's (m0, sc0) and P0 ready
        plgpu.Barrier(num_arrivals=1),                   # s1: WG1's (sc1, m1) and P1 ready
        plgpu.Barrier(num_arrivals=2),                   # sync of both warpgroups
    )
    return (q_s, qpe_p1, p0, kv_o, mw, vec, *barriers)

  def entry(*refs):
    pl.run_scoped(lambda *scr: body(*refs, *scr), *scratch(), collective_axes="wg")

  return plgpu.kernel(
      entry,
      out_type=(jax.ShapeDtypeStruct((bsz, num_splits, num_rows_pad, R), partial_dtype),
                jax.ShapeDtypeStruct((bsz, num_splits, num_rows_pad), jnp.float32)),
      grid=(num_row_tiles, num_splits, bsz), grid_names=("m", "j", "b"),
      num_threads=2, thread_name="wg",
      compiler_params=plgpu.CompilerParams(approx_math=True, reduction_scratch_bytes=0),
      interpret=plgpu.InterpretGPUParams(detect_races=True) if interp else None,
  )


def _opaque_zero():
  """[1] int32 zeros, read inside every wgmma scope of the key loop and added to its shared-memory indices.
  With static indices LLVM hoists the ~80 wgmma smem descriptors of a step (Q, K, kpe, V and P tiles) out of the
  loop as loop invariants; they do not fit beside the 128-register accumulator and ptxas spilled them (SASS of
  the build before the fix: 64 LDL.64 descriptor reloads a key pair, ahead of the HGMMAs; 560 bytes of stack).
  A zero the compiler cannot see keeps each descriptor next to its use (241 registers, no spills)."""
  return jnp.zeros((1,), jnp.int32)


def _check(q_lat, q_pe, ckv, kpe, cache_len, block_mask):
  for name, x in (("q_lat", q_lat), ("q_pe", q_pe), ("ckv", ckv), ("kpe", kpe)):
    if x.dtype != jnp.bfloat16:
      raise ValueError(f"mla_attention_mosaic: {name} must be bfloat16, got {x.dtype}")
  if q_lat.ndim != 4 or ckv.ndim != 3:
    raise ValueError(f"mla_attention_mosaic: q_lat {q_lat.shape} must be [B,T,H,512], ckv {ckv.shape} [B,S,512]")
  bsz, t, h, r = q_lat.shape
  s_len = ckv.shape[1]
  if r != R or q_pe.shape != (bsz, t, h, P) or ckv.shape != (bsz, s_len, R) or kpe.shape != (bsz, s_len, P):
    raise ValueError(f"mla_attention_mosaic: shapes q_lat {q_lat.shape}, q_pe {q_pe.shape}, ckv {ckv.shape}, "
                     f"kpe {kpe.shape}; expected [B,T,H,{R}], [B,T,H,{P}], [B,S,{R}], [B,S,{P}]")
  if s_len % PAIR:
    raise ValueError(f"mla_attention_mosaic: S = {s_len} cache slots must be a multiple of {PAIR}")
  if cache_len.shape != (bsz,):
    raise ValueError(f"mla_attention_mosaic: cache_len {cache_len.shape}, expected ({bsz},)")
  if block_mask.shape != (bsz, t, t):
    raise ValueError(f"mla_attention_mosaic: block_mask {block_mask.shape}, expected {(bsz, t, t)}")


def _kernel_inputs(q_lat, q_pe, cache_len, block_mask, num_keys):
  """The kernel's inputs besides the cache: queries as rows m = t*H + h padded to a multiple of BM
  ([B, Mpad, R] and [B, Mpad, P]), cache_len as int32, and the mask words ([B, NTB, 2, Mpad] int32)."""
  bsz, t, h, _ = q_lat.shape
  m = t * h
  m_pad = pl.cdiv(m, BM) * BM
  cache_len = cache_len.astype(jnp.int32)
  pad = ((0, 0), (0, m_pad - m), (0, 0))
  q = jnp.pad(q_lat.reshape(bsz, m, R), pad)
  qpe = jnp.pad(q_pe.reshape(bsz, m, P), pad)
  words = _mask_words(cache_len, block_mask.astype(bool), h, m_pad, num_keys)
  return q, qpe, cache_len, words


@functools.partial(jax.jit, static_argnames=("scale", "num_splits", "interpret", "partial_dtype", "combine",
                                             "trigger_dependents"))
def _mla_attention(q_lat, q_pe, ckv, kpe, cache_len, block_mask, *, scale, num_splits, interpret,
                   partial_dtype=jnp.bfloat16, combine="pallas", trigger_dependents=False):
  bsz, t, h, _ = q_lat.shape
  s_len = ckv.shape[1]
  m = t * h
  q, qpe, cache_len, words = _kernel_inputs(q_lat, q_pe, cache_len, block_mask, s_len)
  m_pad = q.shape[1]
  kernel = _build_kernel(bsz=bsz, num_q=t, num_rows_pad=m_pad, num_keys=s_len, num_splits=num_splits,
                         scale=scale, dtype=q_lat.dtype, interp=interpret, partial_dtype=partial_dtype,
                         trigger_dependents=trigger_dependents)
  o_part, lse = kernel(cache_len, q, qpe, ckv, kpe, words, _opaque_zero())   # [B,NS,Mpad,R], [B,NS,Mpad] f32
  if num_splits == 1:      # its normalised output is the result (a fully masked row is 0 either way)
    o = o_part[:, 0, :m]
  else:
    o = combine_partials(o_part, lse, combine=combine, out_dtype=q_lat.dtype, num_rows=m, interpret=interpret)
  return o.reshape(bsz, t, h, R).astype(q_lat.dtype)                  # [B, m, R] -> [B, T, H, R]


def _abstract_gpu_context():
  """On a machine without a GPU, trace against an abstract H200 so that the kernel sees a GPU target."""
  if any(d.platform == "gpu" for d in jax.devices()):
    return contextlib.nullcontext()
  return jax.sharding.use_abstract_mesh(abstract_gpu_mesh(num_cores=_NUM_SMS))


def mla_attention_mosaic(q_lat, q_pe, ckv, kpe, cache_len, block_mask, *, scale, num_splits=None,
                         interpret=False, partial_dtype="bfloat16", combine="pallas", trigger_dependents=False):
  """Absorbed MLA tree attention (same contract as reference.mla_attention_reference).

  q_lat [B,T,H,512] bf16; q_pe [B,T,H,64] bf16; ckv [B,S,512] bf16; kpe [B,S,64] bf16 (S % 128 == 0);
  cache_len [B] int32; block_mask [B,T,T] bool. Returns [B,T,H,512] bf16.
  num_splits: key splits per (sequence, row tile) (None: default_num_splits, at most one wave of 132 CTAs).
  interpret: run under Mosaic GPU interpret mode (CPU), with the race detector on.
  partial_dtype: "bfloat16" or "float32", the per-split outputs that the combine reads (with one split, the
  normalised output itself). H200 (issue 6 eighth round): bf16 halves the partials' traffic, 1-2% faster.
  combine: how several splits are combined (split_combine.py), "pallas" (combine_splits_pallas, one Triton
  kernel; in interpret mode, the Triton interpreter) or "xla" (combine_splits).
  trigger_dependents: the kernel issues `griddepcontrol.launch_dependents` first (plgpu's primitive; it does not
  make this kernel a PDL launch itself), so that the next kernel's programs (the split combine's) may be placed on
  the SMs, waiting, as this kernel's CTAs exit rather than after the last one (custom_calls/dependent_launch.py
  has the mechanism). Same results; GPU only (interpreted nothing is issued).
  """
  check_combine("mla_attention_mosaic", combine)
  _check(q_lat, q_pe, ckv, kpe, cache_len, block_mask)
  bsz, t, h, _ = q_lat.shape
  if num_splits is None:
    num_splits = default_num_splits(bsz, t * h, ckv.shape[1])
  if num_splits < 1:
    raise ValueError(f"mla_attention_mosaic: num_splits {num_splits} must be >= 1")
  ctx = _abstract_gpu_context() if interpret else contextlib.nullcontext()
  with ctx:
    return _mla_attention(q_lat, q_pe, ckv, kpe, cache_len, block_mask, scale=float(scale),
                          num_splits=int(num_splits), interpret=bool(interpret),
                          partial_dtype=jnp.dtype(partial_dtype), combine=combine,
                          trigger_dependents=bool(trigger_dependents))
