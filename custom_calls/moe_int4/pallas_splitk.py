"""INT4 grouped MoE for few rows per expert (decode, draft-tree verify): split-K Pallas Triton kernels.

Not used by the dispatch any more: pallas_gemv.py replaced it at few tokens (H200, 1 token: 0.033 ms against
this kernel's 0.072; benchmarks/RESULTS.md, issue 6 fourth round). Kept as a benchmarked alternative
(benchmarks/kernels.py) and for its interpreter tests.

With a handful of (token, expert) pairs per expert the step is memory-bound: every hit expert's INT4
words (24.8 MB per K2.6 expert) must stream at full bandwidth, and the dequantisation must cost less
ALU than the bytes take to arrive. Three choices serve that (pallas_triton.py is the path for many rows):

- Split-K: grid (row block, N tile, K split). Thousands of short programs keep enough loads in flight
  at batch 1; their fp32 partial sums are atomically added into zero-initialised outputs (so the sum
  order, and the last bit of the result, can vary from run to run).
- Dequantisation without shifts or int->float conversions (nibbles.nibble_planes: (nib - 8) * 2**e, exact);
  the 2**-e goes onto the activations here (an exact power-of-two scale of a [rows, BK/8] tile, not of the
  [BN, BK/8] weight tile). Per weight: the nibble's masking, one FADD and the group scale's FMUL.
- TF32 tensor-core dots on fp32 operands: bf16 activations and (nib - 8) * scale (<= 11 significant bits)
  are exact in TF32, so every product is exact and sums are fp32 (no bf16 rounding of the weights).
  float32 activations, or scales that are not bf16, use full fp32 dots instead (Precision.HIGHEST).

Columns follow the compressed-tensors packing (column 8w + j = nibble j of word w): one chunk of BK
columns = BK/8 words per row; nibble j of the chunk's words covers columns 8w + j, so each chunk is 8
dots of K = BK/8 against the activations gathered with stride 8.

Pipeline: route (pallas_triton.route) -> gate/up kernel (g, u fp32 [P_pad, I]) -> h = silu(g) * u (XLA)
-> down kernel, which adds weight * (h W_down^T) straight into out[token] (no [pairs, D] buffer).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from custom_calls.moe_int4.nibbles import MAGIC, nibble_planes
from custom_calls.moe_int4.pallas_triton import block_tokens, load_token_columns, route

BLOCK_M = 16                 # rows per row block: the smallest tensor-core tile (routes are padded to it)


def _chunk_dots(accs, load_act, w_refs, s_refs, e, n0, k0, *, block_n, block_k, group_size, precision):
  """accs[i] += act[:, k0:k0+BK] @ W_i[:, k0:k0+BK]^T for each weight i sharing the activations.

  load_act(cols [BK/8] i32) -> f32 [BM, BK/8]; w_refs: int32 [E, N, K/8]; s_refs: [E, N, K/g].
  """
  bk8 = block_k // 8
  w_idx = jnp.arange(bk8, dtype=jnp.int32)
  rows = n0 + jnp.arange(block_n, dtype=jnp.int32)
  planes, scales = [], []
  for w_ref, s_ref in zip(w_refs, s_refs):
    words = w_ref[e, pl.ds(n0, block_n), pl.ds(k0 // 8, bk8)]                          # [BN, BK/8]
    # column 8w + j lies in group (k0 + 8w) // g for every j (g >= 8)
    scales.append(s_ref[e, rows[:, None], ((k0 + 8 * w_idx) // group_size)[None, :]].astype(jnp.float32))
    planes.append(nibble_planes(words, MAGIC))       # immediate magic: two LOP3s (fine for an undispatched kernel)
  accs = list(accs)
  for j in range(8):
    act = load_act(k0 + 8 * w_idx + j)                                                  # [BM, BK/8] f32
    for i in range(len(accs)):
      q, ex = planes[i][j], 4 * (j % 4)                                                  # (nib - 8) * 2**ex
      a = act * (2.0 ** -ex) if ex else act
      accs[i] += plgpu.dot(a, q * scales[i], trans_b=True, precision=precision)
  return accs


def _gate_up_kernel(bvalid_ref, bexp_ref, tok_ref, x_ref, gw_ref, gs_ref, uw_ref, us_ref, g0_ref, u0_ref,
                    g_ref, u_ref, *, block_m, block_n, block_k, chunks, group_size, num_tokens, precision):
  """Program (row block, I tile, K split). bvalid/bexp: [NB] i32; tok: [P_pad] i32 (num_tokens = padding);
  x: [N, D]; gw/uw: int32 [E, I, D/8]; gs/us: [E, I, D/g]; g/u (aliased to g0/u0, zeros): f32 [P_pad, I]."""
  del g0_ref, u0_ref
  blk, jn, ks = pl.program_id(0), pl.program_id(1), pl.program_id(2)

  @pl.when(bvalid_ref[blk] != 0)
  def _():
    e = bexp_ref[blk]
    toks, tok_ok = block_tokens(tok_ref, blk, block_m, num_tokens)                      # [BM]
    n0 = jn * block_n

    def load_x(cols):
      return load_token_columns(x_ref, toks, tok_ok, cols).astype(jnp.float32)

    def body(c, accs):
      k0 = (ks * chunks + c) * block_k
      return tuple(_chunk_dots(accs, load_x, (gw_ref, uw_ref), (gs_ref, us_ref), e, n0, k0, block_n=block_n,
                               block_k=block_k, group_size=group_size, precision=precision))

    zeros = jnp.zeros((block_m, block_n), jnp.float32)
    acc_g, acc_u = lax.fori_loop(0, chunks, body, (zeros, zeros))
    rows = blk * block_m + jnp.arange(block_m, dtype=jnp.int32)
    cols = n0 + jnp.arange(block_n, dtype=jnp.int32)
    plgpu.atomic_add(g_ref, (rows[:, None], cols[None, :]), acc_g)
    plgpu.atomic_add(u_ref, (rows[:, None], cols[None, :]), acc_u)


def _down_kernel(bvalid_ref, bexp_ref, tok_ref, rw_ref, h_ref, dw_ref, ds_ref, o0_ref, o_ref, *, block_m, block_n,
                 block_k, chunks, group_size, precision):
  """Program (row block, D tile, K split). tok: [P_pad] i32 (N = padding row); rw: [P_pad] f32 routing weight
  of each row (0 for padding); h: f32 [P_pad, I]; dw: int32 [E, D, I/8]; ds: [E, D, I/g];
  o (aliased to o0, zeros): f32 [N + 1, D] (row N collects padding, then dropped)."""
  del o0_ref
  blk, jn, ks = pl.program_id(0), pl.program_id(1), pl.program_id(2)

  @pl.when(bvalid_ref[blk] != 0)
  def _():
    e = bexp_ref[blk]
    n0 = jn * block_n
    rows = blk * block_m + jnp.arange(block_m, dtype=jnp.int32)

    def load_h(cols):
      return h_ref[rows[:, None], cols[None, :]]

    def body(c, accs):
      k0 = (ks * chunks + c) * block_k
      return tuple(_chunk_dots(accs, load_h, (dw_ref,), (ds_ref,), e, n0, k0, block_n=block_n, block_k=block_k,
                               group_size=group_size, precision=precision))

    (acc,) = lax.fori_loop(0, chunks, body, (jnp.zeros((block_m, block_n), jnp.float32),))
    toks = tok_ref[pl.ds(blk * block_m, block_m)]                                      # [BM]
    wts = rw_ref[pl.ds(blk * block_m, block_m)]                                        # [BM]
    cols = n0 + jnp.arange(block_n, dtype=jnp.int32)
    plgpu.atomic_add(o_ref, (toks[:, None], cols[None, :]), acc * wts[:, None])


def default_splitk_blocks(num_tokens):
  """(block_n, block_k, gate/up K splits, down K splits, num_warps, num_stages) for the K2.6 shard
  (D 7168 = 28 chunks of 256, I 2048 = 8 chunks): enough programs for several waves at batch 1
  (H200, benchmarks/RESULTS.md: at 1 token 28/8 splits 0.109 ms, 14/8 0.130 ms, 7/4 0.137 ms)."""
  if num_tokens <= 4:
    return 64, 256, 28, 8, 4, 2
  if num_tokens <= 32:
    return 64, 256, 7, 4, 4, 2
  return 64, 256, 4, 2, 4, 2


def _largest_divisor_at_most(n, k):
  return max(d for d in range(1, min(n, k) + 1) if n % d == 0)


def supported(x, gate_packed, down_packed, group_size, block_k=256):
  e, inter, d8 = gate_packed.shape
  d = d8 * 8
  return (x.dtype in (jnp.bfloat16, jnp.float16, jnp.float32) and group_size in (8, 16, 32, 64, 128)
          and d % block_k == 0 and inter % block_k == 0 and inter % 64 == 0 and d % 64 == 0
          and down_packed.shape == (e, d, inter // 8))


@functools.partial(jax.jit, static_argnames=("group_size", "block_n", "block_k", "splits_up", "splits_down",
                                             "num_warps", "num_stages", "interpret"))
def routed_experts_int4_splitk(x, expert_ids, expert_weights, gate_packed, gate_scale, up_packed, up_scale,
                               down_packed, down_scale, expert_offset=0, *, group_size=32, block_n=None,
                               block_k=None, splits_up=None, splits_down=None, num_warps=None, num_stages=None,
                               interpret=False):
  """Same contract as reference.routed_experts_int4_reference (compressed-tensors arrays as stored).

  x: [N, D]; expert_ids: [N, K] int32 global ids; expert_weights: [N, K];
  gate_packed/up_packed: int32 [E, I, D/8]; gate_scale/up_scale: [E, I, D/g];
  down_packed: int32 [E, D, I/8]; down_scale: [E, D, I/g]. expert_offset may be traced (shard_map).
  splits_up / splits_down: K splits of the gate/up (over D) and down (over I) products (rounded down to
  divisors of the chunk counts). Returns [N, D] in x.dtype.
  """
  n, d = x.shape
  e, inter, _ = gate_packed.shape
  dbn, dbk, dsu, dsd, dnw, dns = default_splitk_blocks(n)
  block_n, block_k = block_n or dbn, block_k or dbk
  num_warps, num_stages = num_warps or dnw, num_stages or dns
  if not supported(x, gate_packed, down_packed, group_size, block_k):
    raise ValueError(f"routed_experts_int4_splitk: unsupported shapes x {x.shape} {x.dtype}, gate_packed "
                     f"{gate_packed.shape}, down_packed {down_packed.shape}, group {group_size}, block_k {block_k} "
                     "(need D and I multiples of block_k and of 64)")
  if block_k < 128 or block_k % 8 or d % block_n or inter % block_n:
    raise ValueError(f"routed_experts_int4_splitk: block_k {block_k} must be >= 128 (dots of K = block_k/8 >= 16) "
                     f"and block_n {block_n} must divide D = {d} and I = {inter}")
  if gate_scale.shape != (e, inter, d // group_size) or down_scale.shape != (e, d, inter // group_size):
    raise ValueError(f"routed_experts_int4_splitk: scales {gate_scale.shape}, {down_scale.shape} do not match "
                     f"group_size {group_size}")
  routes = route(expert_ids, e, expert_offset, BLOCK_M)
  return splitk_from_routes(x, routes, expert_weights, gate_packed, gate_scale, up_packed, up_scale, down_packed,
                            down_scale, group_size=group_size, block_n=block_n, block_k=block_k,
                            splits_up=splits_up or dsu, splits_down=splits_down or dsd, num_warps=num_warps,
                            num_stages=num_stages, interpret=interpret)


def splitk_from_routes(x, routes, expert_weights, gate_packed, gate_scale, up_packed, up_scale, down_packed,
                       down_scale, *, group_size, block_n, block_k, splits_up, splits_down, num_warps, num_stages,
                       interpret):
  """The kernels after routing. routes = pallas_triton.route(expert_ids, E, expert_offset, BLOCK_M) =
  (row_token [P_pad] i32 (N on padding rows), pos [N, K] i32 (sorted row of each pair), is_local [N, K] bool,
  block_valid [P_pad / BLOCK_M] i32, block_expert [P_pad / BLOCK_M] i32)."""
  n, d = x.shape
  e, inter, _ = gate_packed.shape
  su = _largest_divisor_at_most(d // block_k, splits_up)
  sd = _largest_divisor_at_most(inter // block_k, splits_down)
  # TF32 is exact only for bf16/f16 activations and bf16 scales ((nib - 8) * scale in 11 significant bits)
  exact_tf32 = x.dtype != jnp.float32 and gate_scale.dtype == down_scale.dtype == jnp.bfloat16
  precision = None if exact_tf32 else lax.Precision.HIGHEST
  block_m = BLOCK_M
  row_token, pos, is_local, block_valid, block_expert = routes
  p_pad = row_token.shape[0]
  nb = p_pad // block_m
  # routing weight of each sorted row (0 on padding rows, whose token id is n)
  row_weight = jnp.zeros((p_pad,), jnp.float32).at[pos.reshape(-1)].add(
      jnp.where(is_local, expert_weights.astype(jnp.float32), 0.0).reshape(-1))
  params = plgpu.CompilerParams(num_warps=num_warps, num_stages=num_stages)
  zeros_h = jnp.zeros((p_pad, inter), jnp.float32)

  g, u = pl.pallas_call(
      functools.partial(_gate_up_kernel, block_m=block_m, block_n=block_n, block_k=block_k,
                        chunks=d // block_k // su, group_size=group_size, num_tokens=n, precision=precision),
      grid=(nb, inter // block_n, su),
      out_shape=[jax.ShapeDtypeStruct((p_pad, inter), jnp.float32)] * 2,
      input_output_aliases={8: 0, 9: 1},
      compiler_params=params, interpret=interpret, name="moe_int4_gate_up_splitk",
  )(block_valid, block_expert, row_token, x, gate_packed, gate_scale, up_packed, up_scale, zeros_h, zeros_h)

  h = jax.nn.silu(g) * u                                                       # [P_pad, I] f32

  # On the GPU each row adds weight * y into out[token]. The Pallas interpreter's atomic_add keeps only one
  # of several adds to the same address in one call, and a token routed twice to one expert puts two rows
  # of one block on the same out row; interpreted, the kernel therefore adds each row into a row of its
  # own ([P_pad, D], weight 1) and the combine below is a gather, as in pallas_triton.
  dest, dest_weight, n_dest = ((jnp.arange(p_pad, dtype=jnp.int32), jnp.ones((p_pad,), jnp.float32), p_pad)
                               if interpret else (row_token, row_weight, n))
  out = pl.pallas_call(
      functools.partial(_down_kernel, block_m=block_m, block_n=block_n, block_k=block_k,
                        chunks=inter // block_k // sd, group_size=group_size, precision=precision),
      grid=(nb, d // block_n, sd),
      out_shape=jax.ShapeDtypeStruct((n_dest + 1, d), jnp.float32),
      input_output_aliases={7: 0},
      compiler_params=params, interpret=interpret, name="moe_int4_down_splitk",
  )(block_valid, block_expert, dest, dest_weight, h, down_packed, down_scale,
    jnp.zeros((n_dest + 1, d), jnp.float32))
  if interpret:
    yk = out[pos]                                                              # [N, K, D]
    w = expert_weights.astype(jnp.float32)[..., None]
    return jnp.sum(jnp.where(is_local[..., None], w * yk, 0.0), axis=1).astype(x.dtype)
  return out[:n].astype(x.dtype)
