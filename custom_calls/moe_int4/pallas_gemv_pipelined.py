"""INT4 MoE for a few tokens in ONE launch: pallas_gemv's gate/up and down programs in one grid.

pallas_gemv runs two launches: every gate/up program, then every down program. Between them the GPU drains
(the gate/up kernel's last programs run on a few SMs) and refills (the down kernel's ramp). In the dispatch's own
harness a kernel that only READS the bytes took 73.1 us at 6 tokens as two such launches and 61.8 us as one
launch (H100, benchmarks/RESULTS.md, issue 6 twenty-fifth round). Here both parts are programs of one grid, in
this order (L = lag, N tokens, G(t) = the I/BN gate/up programs of token t, D(t) = the D/BND down programs of
token t):

    G(0) .. G(L-1) | G(L) D(0) | G(L+1) D(1) | ... | G(N-1) D(N-1-L) | D(N-L) .. D(N-1)

The default L = N puts every gate/up program first: the two launches' order, without the launch boundary.
- G(t) program j: columns [j*BN, (j+1)*BN) of h for each of token t's local pairs (pallas_gemv.gate_up_rows),
  then one arrival on token t's counter (a CTA barrier, then one acquire-release atomic add at GPU scope).
- D(t) program j: waits until all I/BN programs of G(t) have arrived (polls of the counter), then writes out[t,
  j*BND:(j+1)*BND] (pallas_gemv.down_token_rows): the same sums as pallas_gemv's down kernel.
- A down program only waits on programs placed before it in the grid. CUDA starts a grid's programs in order
  of their index in practice, so the programs it waits on have started and, waiting on nothing, finish. That
  order is not a documented guarantee: `ticket=True` takes each program's place from an atomic counter instead
  (the order programs actually started in), which is safe under any scheduling, at one atomic per program.
- A wait that gives up after grid_sync.SPIN_LIMIT polls writes NaN into its rows: a broken schedule fails the check
  instead of hanging the GPU.
- `wait_flags` K > 0 (not the default; at 1 token still slower than two launches, see the function): token t's last
  gate/up program sets K flags, each on its own line, and its down programs poll one each, instead of all polling the
  counter its gate/up programs add to.
- The counters (and the ticket) are constant words in the rows after the planes of the kernel's int32 input, which
  XLA makes in one kernel with the expert offset and the activation planes (planes_consts.py), so no zero-fill runs
  and no copy of a constant; the kernel updates them in place (an aliased output). XLA makes that array anew for
  each call (test_gpu_kernel calls the kernel twice in one program to check that the second call's counters start
  at 0).
- No compaction of the local pairs: G(t) and D(t) visit token t's top-k pairs and skip the remote ones, as the
  down kernel always has. A token with no local pair makes empty programs.

H100, k-chunked 256 experts, one local expert per token, us per call (benchmarks/RESULTS.md, issue 6 twenty-seventh
round): at 4 / 6 / 8 tokens L = N took 57.6 / 79.4-79.8 / 100.6 against the dispatch's 59.6 / 81.9-83.7 / 107.6
(two launches of pallas_gemv at 4-6 tokens, the grouped kernels at 8). L = 1 was slower (65.5 / 87.5 / 111.0: down
programs wait while their tokens' gate/up programs still run), L = 2-4 in between, the ticket slowest (72.9 /
102.9 / 132.2). At 1-2 tokens it lost or tied (35.0 / 35.7 against 20.7 / 35.1), and at 10-12 tokens with
pallas_gemv's defaults there it lost to the grouped kernels (161.8 / 190.1 against 116.6 / 131.6).

Numerics: the same as pallas_gemv in token order with runs of one pair (h rounded to the activation dtype).
Interpreted (CPU tests) the programs run one after another in grid order, every wait is already met, and a wait
reads its counter once.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from custom_calls.moe_int4.grid_sync import (FLAG_STRIDE, arrive, arrive_and_broadcast, check_sleep_ns,
                                             counter_wait, flag_index, poison_unless, valid_num_flags)
from custom_calls.moe_int4.k_chunks import logical_shape
from custom_calls.moe_int4.planes_consts import OFFSET_WORD, const_index, const_word, planes_and_consts
from custom_calls.moe_int4.pallas_gemv import (check_experts, down_token_rows, gate_up_rows, tile_blocks,
                                               tile_options)

_FIRST_COUNTER = 2          # constant words: [expert offset, MAGIC, counter of token 0 .. N-1, ticket]
                            # (+ with wait_flags K, from the next 128-byte line: K flags of token 0, 1, ..., one a line)


def flags_base(tokens):
  """The constant word of token 0's first flag (wait_flags): the first 128-byte line after the counters and the
  ticket."""
  return -(-(_FIRST_COUNTER + tokens + 1) // FLAG_STRIDE) * FLAG_STRIDE


# The K loop's prefetch (pallas_gemv._tile_gemv) in one launch, at every token count. pallas_gemv's two launches use
# 1 at one token, where this kernel with it (H100, k-chunked 256, wait_flags 64; benchmarks/RESULTS.md, issue 6
# thirty-fourth round) took 23.7 us of kernel against 21.6 with 0, and compiled for minutes: 7 min 19 s from its
# Triton IR for sm_90 on a 2-core CPU (Triton 3.6.0) against 95 s with 0. From 2 tokens both defaults are 0.
ONE_LAUNCH_PREFETCH = 0


def check_wait_flags(name, wait_flags):
  """A wait_flags option: 0 (the down programs poll their token's counter) or a flag count grid_sync takes (a power
  of two in [1, 256])."""
  if not (valid_num_flags(wait_flags) or (wait_flags == 0 and type(wait_flags) is int)):
    raise ValueError(f"{name}: wait_flags {wait_flags!r} must be 0 or a power of two in [1, 256] (0: poll the "
                     "token's counter; K: the last gate/up program of a token sets K flags, one Triton vector, and "
                     "down program j polls flag j % K)")


def program_place(q, *, tokens, gate_up_programs, down_programs, lag):
  """Grid place q (0 <= q < N * (G + D)) -> (is gate/up, token, column tile), in the module docstring's order.
  Traced int32 scalars in and out (also used by the tests with Python ints)."""
  g, d = gate_up_programs, down_programs
  lag = min(lag, tokens)
  q = jnp.asarray(q, jnp.int32)
  head = lag * g                                         # G(0) .. G(L-1)
  full = (tokens - lag) * (g + d)                        # blocks [G(t + L), D(t)]
  in_head = q < head
  r = q - head
  in_full = (~in_head) & (r < full)
  t_full, j_full = r // (g + d), r % (g + d)
  r_tail = r - full                                      # D(N-L) .. D(N-1)
  gate_up = in_head | (in_full & (j_full < g))
  token = jnp.where(in_head, q // g,
                    jnp.where(in_full, jnp.where(j_full < g, t_full + lag, t_full), tokens - lag + r_tail // d))
  tile = jnp.where(in_head, q % g, jnp.where(in_full, jnp.where(j_full < g, j_full, j_full - g), r_tail % d))
  return gate_up, token, tile


def _pipelined_kernel(xc_ref, ids_ref, wts_ref, gw_ref, gs_ref, uw_ref, us_ref, dw_ref, ds_ref,
                      hp_ref, out_ref, sync_ref, *, top_k, num_local, lag, ticket, block_n, block_n_down, block_k,
                      block_k_down, group_size, h_dtype, prefetch, unroll_pairs, nibble4_in_place, row_splits,
                      wait_sleep_ns, wait_flags, interpret):
  """One program of the grid (module docstring). xc (aliased by sync): int32 [N + R, D], planes_consts.py's array:
  the f32 planes [N, 8 * D/8] as bits, then the constant words [2 + N + 1] (with wait_flags K > 0, then K flags a
  token from flags_base(N), one 128-byte line each); ids/wts: [P]; gw/uw: int32 [E, I, D/8] (or k-chunked); hp: f32
  [P, 8 * I/8] planes (rows of remote pairs unwritten); out: [N, D]."""
  tokens, d = out_ref.shape
  word = functools.partial(const_index, tokens, d)      # constant word w -> its [row, column] in xc
  inter = hp_ref.shape[1]
  g, dn = inter // block_n, d // block_n_down
  if ticket:
    q = plgpu.atomic_add(sync_ref, word(_FIRST_COUNTER + tokens), jnp.int32(1))
  else:
    q = pl.program_id(0)
  gate_up, t, j = program_place(q, tokens=tokens, gate_up_programs=g, down_programs=dn, lag=lag)
  in_place_gate_up, in_place_down = nibble4_in_place
  token_flags = lambda t: flags_base(tokens) + t * wait_flags * FLAG_STRIDE      # token t's flag 0 (wait_flags)

  offset = const_word(xc_ref, tokens, OFFSET_WORD)

  @pl.when(gate_up)
  def _():
    run = functools.partial(gate_up_rows, xc_ref, gw_ref, gs_ref, uw_ref, us_ref, hp_ref, j * block_n,
                            top_k=top_k, num_tokens=tokens, block_n=block_n, block_k=block_k, group_size=group_size,
                            h_dtype=h_dtype,
                            prefetch=prefetch, nibble4_in_place=in_place_gate_up,
                            h_nibble4_in_place=in_place_down)

    def pair(k):
      p = t * top_k + k
      e = ids_ref[p] - offset
      run([p], [(e >= 0) & (e < num_local)], e)

    if unroll_pairs:
      for k in range(top_k):
        pair(k)
    else:
      lax.fori_loop(0, top_k, lambda k, c: (pair(k), c)[1], 0)
    if wait_flags:
      arrive_and_broadcast(sync_ref, word(_FIRST_COUNTER + t), g, token_flags(t), wait_flags, interpret=interpret,
                           index_of=word)
    else:
      arrive(sync_ref, word(_FIRST_COUNTER + t), interpret=interpret)

  @pl.when(jnp.logical_not(gate_up))
  def _():
    if wait_flags:     # one of the K flags that token t's last gate/up program sets, not the counter all add to
      ok = counter_wait(sync_ref, word(flag_index(token_flags(t), j % wait_flags)), 1, interpret=interpret,
                        sleep_ns=wait_sleep_ns)
    else:
      ok = counter_wait(sync_ref, word(_FIRST_COUNTER + t), g, interpret=interpret, sleep_ns=wait_sleep_ns)
    down_token_rows(xc_ref, ids_ref, wts_ref, hp_ref, dw_ref, ds_ref, out_ref, j * block_n_down, t, top_k=top_k,
                    num_local=num_local, block_n=block_n_down, block_k=block_k_down, group_size=group_size,
                    prefetch=prefetch, unroll_pairs=unroll_pairs, nibble4_in_place=in_place_down,
                    row_splits=row_splits, poison=poison_unless(ok))


@functools.partial(jax.jit, static_argnames=("group_size", "block_n", "block_n_down", "block_k", "block_k_down",
                                             "num_warps", "num_stages", "prefetch", "unroll_pairs",
                                             "nibble4_in_place", "down_row_splits", "lag", "ticket", "wait_sleep_ns",
                                             "wait_flags", "interpret"))
def routed_experts_int4_gemv_pipelined(x, expert_ids, expert_weights, gate_packed, gate_scale, up_packed, up_scale,
                                       down_packed, down_scale, expert_offset=0, *, group_size=32, block_n=None,
                                       block_n_down=None, block_k=None, block_k_down=None, num_warps=None,
                                       num_stages=None, prefetch=None, unroll_pairs=True, nibble4_in_place=None,
                                       down_row_splits=None, lag=None, ticket=False, wait_sleep_ns=0,
                                       wait_flags=0, interpret=False):
  """Same contract as reference.routed_experts_int4_reference (stored or k-chunked arrays, as pallas_gemv).

  Options as routed_experts_int4_gemv's (defaults from default_gemv_blocks(N) and friends); the pairs are visited
  token by token (no pair_splits, sort_pairs, rank_in_kernel or compaction). lag L >= 1: the down programs of token
  t follow the gate/up programs of token t + L (None, the default, or L >= N: every gate/up program first, the
  two launches' order in one launch). ticket: each program's place from an atomic counter (module docstring).
  wait_sleep_ns: how a down program polls its token's counter (grid_sync.counter_wait; > 0 measured slower).
  wait_flags K > 0: the last gate/up program of token t sets K flags (grid_sync.arrive_and_broadcast) and down
  program j of token t polls flag j % K instead of the counter every gate/up program adds to (the 896 down
  programs of a token then spread their polls over K lines). Same results. At 1 token (H100, k-chunked 256,
  benchmarks/RESULTS.md, issue 6 thirty-fourth round) K = 64 took 21.6 us of kernel against the two launches'
  16.1, so the dispatch keeps two launches there.
  prefetch: ONE_LAUNCH_PREFETCH by default, not pallas_gemv's default. Returns [N, D] in x.dtype.
  """
  n, d = x.shape
  top_k = expert_ids.shape[1]
  e, inter, _ = logical_shape(gate_packed)
  block_n, block_n_down, block_k, block_k_down, num_warps, num_stages = tile_blocks(
      n, d, inter, block_n, block_n_down, block_k, block_k_down, num_warps, num_stages)
  name = "routed_experts_int4_gemv_pipelined"
  check_experts(name, x, gate_packed, gate_scale, up_packed, up_scale, down_packed, down_scale, group_size, block_k,
                block_k_down)
  if inter % block_n or d % block_n_down:
    raise ValueError(f"{name}: block_n {block_n} must divide I = {inter} and block_n_down {block_n_down} must "
                     f"divide D = {d}")
  if lag is None:
    lag = n
  if not (isinstance(lag, int) and not isinstance(lag, bool) and lag >= 1):
    raise ValueError(f"{name}: lag {lag!r} must be an int >= 1 (token t's down programs follow token t + lag's "
                     "gate/up programs)")
  check_sleep_ns(name, wait_sleep_ns)
  check_wait_flags(name, wait_flags)
  if prefetch is None:
    prefetch = ONE_LAUNCH_PREFETCH
  nibble4_in_place, down_row_splits, prefetch = tile_options(name, n, block_n_down, nibble4_in_place,
                                                             down_row_splits, prefetch)
  p = n * top_k
  ids = expert_ids.reshape(p).astype(jnp.int32)
  wts = expert_weights.reshape(p).astype(jnp.float32)
  sync_words = flags_base(n) + n * wait_flags * FLAG_STRIDE if wait_flags else n + 1 + _FIRST_COUNTER
  # The constant words (the counters zero) and the f32 planes (pre-scaled) in one int32 array: one XLA kernel
  # before this one (planes_consts.py)
  xc = planes_and_consts(x, expert_offset, sync_words, nibble4_in_place[0])
  grid = n * (inter // block_n + d // block_n_down)
  kernel = functools.partial(
      _pipelined_kernel, top_k=top_k, num_local=e, lag=lag, ticket=ticket, block_n=block_n,
      block_n_down=block_n_down, block_k=block_k, block_k_down=block_k_down, group_size=group_size, h_dtype=x.dtype,
      prefetch=prefetch, unroll_pairs=unroll_pairs, nibble4_in_place=nibble4_in_place, row_splits=down_row_splits,
      wait_sleep_ns=wait_sleep_ns, wait_flags=wait_flags, interpret=interpret)
  _, out, _ = pl.pallas_call(
      kernel, grid=(grid,),
      out_shape=(jax.ShapeDtypeStruct((p, inter), jnp.float32), jax.ShapeDtypeStruct((n, d), x.dtype),
                 jax.ShapeDtypeStruct(xc.shape, jnp.int32)),
      input_output_aliases={0: 2},
      compiler_params=plgpu.CompilerParams(num_warps=num_warps, num_stages=num_stages),
      interpret=interpret, name="moe_int4_gemv_pipelined",
  )(xc, ids, wts, gate_packed, gate_scale, up_packed, up_scale, down_packed, down_scale)
  return out
