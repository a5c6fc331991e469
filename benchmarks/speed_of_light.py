"""Speed of light of the few-token shapes: how fast can a kernel that only READS the roofline's bytes go, in the
same chained harness that times the dispatch (benchmarks/kernels.py timeit: queued samples, medians, rotating
random inputs, the harness's own add + reduction in every figure)?

The issue's targets at 1-10 tokens (INT4 MoE, 0.75 of bytes / copy bandwidth) and at batch-1 MLA decode (0.8)
leave 3-13 us per call. This script separates what the dispatch's arithmetic costs from what the launch
structure costs, by timing kernels that read exactly the bytes the roofline counts and do almost nothing else:

INT4 MoE (K2.6 shard, stored layout; the words summed as int32, the scales as f32, one pass over every hit
expert's gate, up and down words and scales; pallas_gemv's column tiles and K steps, each program visiting every
(token, expert) pair and skipping the remote ones, in straight-line code up to UNROLL_MAX_PAIRS pairs):
  dispatch     custom_calls.moe_int4.routed_experts_int4, impl "pallas" (what the model runs);
  read_2       two launches, gate/up rows then down rows; the second reads the first's output (so XLA orders
               them, as the gemv's down kernel reads h);
  read_1       one launch: programs [0, G1) read gate/up rows, [G1, G1 + G2) down rows, with no dependence (the
               bound of a single launch over this grid);
  read_1_spin  one launch with the dependence kept inside it: the down programs read their rows, then wait on
               a counter that every gate/up program increments when done, then read the first part's output
               (the "down weights load while gate/up runs" design; a wait that gives up writes NaN);
  read_1_sleep the same, the wait polling with volatile loads and a nanosleep of SLEEP_NS between them
               (grid_sync.counter_wait, sleep_ns) instead of back-to-back acquire-release atomics, each of which
               also invalidates the waiting SM's L1 (CCTL.IVALL in the SASS);
  read_1_volatile  the same volatile polls back to back, with no sleep (what the polls alone cost);
  read_1_flags the atomic polls of read_1_spin, but not all on the word the gate/up programs add to: the last of
               them sets NUM_FLAGS flags, one 128-byte line each (grid_sync.arrive_and_broadcast), and down
               program i polls flag i % NUM_FLAGS (does a crowd of polls on the arrivals' word delay the arrivals?);
  read_1_flags_volatile  the same flags, polled by volatile loads back to back;
  xla_read     XLA reductions over the hit experts' arrays (dynamic slices fused into the reductions; indexed
               through x, so that they stay on the harness's chain).
MLA decode (1 x T=1 x H x ctx, the latent cache ckv [1, S, 512] + kpe [1, S, 64] bf16):
  dispatch     custom_calls.mla_attention, impl "auto";
  read         one launch over the dispatch's key splits: per split, ones @ key block on the tensor cores (loads
               pipelined by Triton as the attention kernel's are), [16, 512] f32 partials out;
  read_combine the same, then split_combine.combine_partials over the splits (the dispatch's two launches);
  xla_read     XLA's reduction of the cache over keys (scaled through x, on the chain).
Every read kernel is checked against an XLA computation of the same sums.

Usage (GPU): PYTHONPATH=. python3 benchmarks/speed_of_light.py [--moe_tokens 1,2,4] [--mla_ctx 8192,32768]
       (CPU): PYTHONPATH=. python3 benchmarks/speed_of_light.py --smoke   (interpret mode, tiny shapes, ~5 min;
              tests/test_speed_of_light.py checks the read kernels alone)
       --device_span N: also each variant's device time of one call alone (device_span.py), next to the chained
              figure (GPU only).
Writes $OUT/speed_of_light.json (or --out).
"""
from __future__ import annotations

import argparse
import functools
import math
import os
import sys
import time

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernels as kb   # noqa: E402  (the timing harness, rooflines and inputs of benchmarks/kernels.py)
from custom_calls.mla_attention import mla_attention  # noqa: E402
from custom_calls.mla_attention.pallas_triton import default_num_splits  # noqa: E402
from custom_calls.mla_attention.split_combine import combine_partials  # noqa: E402
from custom_calls.moe_int4 import grid_sync, routed_experts_int4  # noqa: E402
from ddtree_jax.train.common import write_json  # noqa: E402

SPIN_LIMIT = 1 << 18          # polls of the counter before a read_1_* wait gives up and writes NaN
SLEEP_NS = 200                # read_1_sleep: the nanosleep between two polls
MOE_VARIANTS = ("read_2", "read_1", "read_1_spin", "read_1_sleep", "read_1_volatile", "read_1_flags",
                "read_1_flags_volatile")
NUM_FLAGS = 64                # read_1_flags*: flags the last gate/up program sets (K2.6's 896 down programs: 14 a flag)
FLAG_BASE = grid_sync.FLAG_STRIDE   # flag 0's word: the line after the one holding the offset and the counter


# ---------------------------------------------------------------------------------------------------- MoE
def _rows_sum(mats, e, n0, *, block_n, block_k, group_size, unrolled):
  """f32 [BN]: per row n0 + i of expert e, sum of its int32 words (wrapping) * 2**-24 + sum of its f32 scales,
  over every (w_ref [E, N, K/8] int32, s_ref [E, N, K/g]) in mats. K steps of block_k weights (the gemv's)."""
  bk8, bg = block_k // 8, block_k // group_size
  steps = mats[0][0].shape[2] // bk8

  def step(c, acc):
    words, scales = acc
    for w_ref, s_ref in mats:
      words = words + w_ref[e, pl.ds(n0, block_n), pl.ds(c * bk8, bk8)]
      scales = scales + s_ref[e, pl.ds(n0, block_n), pl.ds(c * bg, bg)].astype(jnp.float32)
    return words, scales

  acc = (jnp.zeros((block_n, bk8), jnp.int32), jnp.zeros((block_n, bg), jnp.float32))
  if unrolled:                         # straight-line code: every step's loads can be in flight at once
    for c in range(steps):
      acc = step(c, acc)
  else:
    acc = lax.fori_loop(0, steps, step, acc)
  return jnp.sum(acc[0], axis=1).astype(jnp.float32) * 2.0 ** -24 + jnp.sum(acc[1], axis=1)


UNROLL_MAX_PAIRS = 8          # pairs (first part) or tokens x top-k (second part) visited in straight-line code;
                              # above, a loop (the compile grows with every unrolled pair)


def _first_part(j, consts_ref, ids_ref, x_ref, gw_ref, gs_ref, uw_ref, us_ref, h_ref, *, top_k, cfg):
  """Gate/up rows [j*BN, (j+1)*BN) of every local pair's expert -> h[pair, rows] (remote pairs' rows unwritten)."""
  bn = cfg["block_n"]

  def visit(p):
    e = ids_ref[p] - consts_ref[0]

    @pl.when((e >= 0) & (e < gw_ref.shape[0]))
    def _():
      v = _rows_sum(((gw_ref, gs_ref), (uw_ref, us_ref)), e, j * bn, block_n=bn, block_k=cfg["block_k"],
                    group_size=cfg["group_size"], unrolled=cfg["unrolled"])
      h_ref[p, pl.ds(j * bn, bn)] = v + x_ref[p // top_k, 0].astype(jnp.float32)

  pairs = ids_ref.shape[0]
  if pairs <= UNROLL_MAX_PAIRS:
    for p in range(pairs):
      visit(p)
  else:
    lax.fori_loop(0, pairs, lambda p, carry: (visit(p), carry)[1], 0)


def _second_part(j, consts_ref, ids_ref, x_ref, h_ref, dw_ref, ds_ref, out_ref, *, top_k, cfg, wait=None):
  """Down rows [j*BN, (j+1)*BN) of every local pair's expert, summed per token -> out[token, rows].
  h_ref None: no dependence on the first part; wait: called between the down reads and the read of h."""
  bn = cfg["block_n_down"]

  def token(t):
    acc = jnp.zeros((bn,), jnp.float32) + x_ref[t, 0].astype(jnp.float32)
    for k in range(top_k):
      p = t * top_k + k
      e = ids_ref[p] - consts_ref[0]

      def add(acc, p=p, e=e):
        v = _rows_sum(((dw_ref, ds_ref),), e, j * bn, block_n=bn, block_k=cfg["block_k_down"],
                      group_size=cfg["group_size"], unrolled=cfg["unrolled"])
        if h_ref is not None:
          if wait is not None:
            v = v + wait()
          v = v + h_ref[p, 0]
        return acc + v

      acc = lax.cond((e >= 0) & (e < dw_ref.shape[0]), add, lambda acc: acc, acc)
    out_ref[t, pl.ds(j * bn, bn)] = acc

  tokens = out_ref.shape[0]
  if tokens * top_k <= UNROLL_MAX_PAIRS:
    for t in range(tokens):
      token(t)
  else:
    lax.fori_loop(0, tokens, lambda t, carry: (token(t), carry)[1], 0)


def _counter_wait(sync_ref, index, target, *, interpret, poll, sleep_ns):
  """Poll word `index` (the counter, word 1, or a flag) until it reaches target (grid_sync.counter_wait: poll
  "atomic", back-to-back atomic polls as round 25 timed them, or "volatile", with a nanosleep of sleep_ns between
  them when sleep_ns > 0); 0.0, or NaN when SPIN_LIMIT polls gave up. Interpreted, the programs run one after
  another: one read of the word."""
  return grid_sync.poison_unless(grid_sync.counter_wait(sync_ref, index, target, interpret=interpret,
                                                        poll=poll, sleep_ns=sleep_ns, spin_limit=SPIN_LIMIT))


def moe_read(x, ids, gw, gs, uw, us, dw, ds, *, variant, cfg, interpret=False):
  """The read kernels (module docstring). x [N, D]; ids [N, K] int32 (local experts 0..E-1); stored-layout
  arrays. Returns f32 [N, D]."""
  n, d = x.shape
  top_k = ids.shape[1]
  inter = gw.shape[1]
  g1, g2 = inter // cfg["block_n"], d // cfg["block_n_down"]
  flat = ids.reshape(-1).astype(jnp.int32)
  flags = variant.startswith("read_1_flags")
  # expert offset 0, counter 0 (and the flags, one line each)
  consts = jnp.zeros((grid_sync.flag_index(FLAG_BASE, NUM_FLAGS - 1) + 1 if flags else 2,), jnp.int32)
  params = plgpu.CompilerParams(num_warps=cfg["num_warps"], num_stages=1)
  call = functools.partial(pl.pallas_call, compiler_params=params, interpret=interpret)
  h_shape = jax.ShapeDtypeStruct((n * top_k, inter), jnp.float32)
  out_shape = jax.ShapeDtypeStruct((n, d), jnp.float32)
  first = functools.partial(_first_part, top_k=top_k, cfg=cfg)
  second = functools.partial(_second_part, top_k=top_k, cfg=cfg)
  if variant == "read_2":
    h = call(lambda c, i, xr, a, b, u, v, hr: first(pl.program_id(0), c, i, xr, a, b, u, v, hr), grid=(g1,),
             out_shape=h_shape, name="sol_moe_first")(consts, flat, x, gw, gs, uw, us)
    return call(lambda c, i, xr, hr, a, b, o: second(pl.program_id(0), c, i, xr, hr, a, b, o), grid=(g2,),
                out_shape=out_shape, name="sol_moe_second")(consts, flat, x, h, dw, ds)
  if variant not in MOE_VARIANTS:
    raise ValueError(f"moe_read: unknown variant {variant!r}")
  spin = variant != "read_1"
  poll = "volatile" if variant in ("read_1_sleep", "read_1_volatile", "read_1_flags_volatile") else "atomic"
  sleep_ns = SLEEP_NS if variant == "read_1_sleep" else 0

  def wait(sync, pid):
    if flags:
      at = grid_sync.flag_index(FLAG_BASE, (pid - g1) % NUM_FLAGS)
      return _counter_wait(sync, at, 1, interpret=interpret, poll=poll, sleep_ns=sleep_ns)
    return _counter_wait(sync, jnp.int32(1), g1, interpret=interpret, poll=poll, sleep_ns=sleep_ns)

  def fused(c, i, xr, a, b, u, v, dwr, dsr, hr, o, sync):
    pid = pl.program_id(0)

    @pl.when(pid < g1)
    def _():
      first(pid, c, i, xr, a, b, u, v, hr)
      if flags:                     # this program's h stores, its arrival, and the flags if it is the last
        grid_sync.arrive_and_broadcast(sync, jnp.int32(1), g1, FLAG_BASE, NUM_FLAGS, interpret=interpret)
      elif spin:
        grid_sync.arrive(sync, jnp.int32(1), interpret=interpret)   # this program's h stores, then its arrival

    @pl.when(pid >= g1)
    def _():
      second(pid - g1, c, i, xr, hr if spin else None, dwr, dsr, o,
             wait=functools.partial(wait, sync, pid) if spin else None)

  sync_shape = jax.ShapeDtypeStruct(consts.shape, jnp.int32)
  _, out, _ = call(fused, grid=(g1 + g2,), out_shape=(h_shape, out_shape, sync_shape),
                   input_output_aliases={0: 2}, name=f"sol_moe_{variant}")(consts, flat, x, gw, gs, uw, us, dw, ds)
  return out


def moe_read_reference(x, ids, gw, gs, uw, us, dw, ds, *, variant):
  """XLA: what moe_read(variant) computes (int32 word sums wrap as the kernel's do)."""
  f32 = jnp.float32
  words = lambda w: jnp.sum(w, axis=-1).astype(f32) * 2.0 ** -24                # [E, rows]
  scales = lambda s: jnp.sum(s.astype(f32), axis=-1)
  x0 = x[:, 0].astype(f32)                                                      # [N]
  first = words(gw + uw) + scales(gs) + scales(us)                              # [E, I]: one int32 accumulator
  down = words(dw) + scales(ds)                                                 # [E, D]
  local = (ids >= 0) & (ids < gw.shape[0])                                      # [N, K]
  e = jnp.clip(ids, 0, gw.shape[0] - 1)
  per_pair = down[e]                                                            # [N, K, D]
  if variant != "read_1":
    per_pair = per_pair + (first[e, 0] + x0[:, None])[..., None]               # h[pair, 0]
  return x0[:, None] + jnp.sum(jnp.where(local[..., None], per_pair, 0.0), axis=1)


def xla_read(x, ids, gw, gs, uw, us, dw, ds):
  """XLA's reductions over the hit experts' arrays, a dynamic slice of each fused into its reduction (no gather
  copy). Reads expert ids[t, 0] of every token t: kernels.moe_inputs routes each token to exactly one local
  expert, in column 0 (a conditional per pair would cost XLA a host round trip). The expert index depends on x
  (+ isnan(x), 0 on the harness's finite inputs), so that the reductions sit on the harness's chain: otherwise XLA
  would merge the identical reductions of calls that share an input set, or run them off the chain."""
  f32 = jnp.float32
  total = x[:, 0].astype(f32)
  for t in range(x.shape[0]):
    e = jnp.clip(ids[t, 0] + jnp.isnan(x[t, 0]).astype(jnp.int32), 0, gw.shape[0] - 1)
    parts = [jnp.sum(lax.dynamic_index_in_dim(a, e, keepdims=False).astype(jnp.int32 if a.dtype == jnp.int32
                                                                            else f32)).astype(f32)
             for a in (gw, gs, uw, us, dw, ds)]
    total = total.at[t].add(sum(parts))
  return total


def moe_shape(smoke):
  """(E, D, I, group, configs) of the MoE runs: the K2.6 shard, or a tiny one for --smoke."""
  if smoke:
    return 4, 256, 128, 32, [dict(block_n=16, block_n_down=32, block_k=128, block_k_down=128, num_warps=4,
                                  group_size=32, unrolled=True)]
  base = dict(block_n=4, block_n_down=8, block_k=1024, block_k_down=1024, num_warps=4, group_size=32)
  return 48, 7168, 2048, 32, [dict(base, unrolled=True), dict(base, unrolled=False),
                              dict(base, block_n=8, block_n_down=16, unrolled=True)]


def time_variant(row, name, fn, arg_sets):
  """row["times_s"][name]: kb.timeit's chained figure; with --device_span (kb.add_device_span) also
  row["device_busy_s"][name] (one call's kernels' GPU time alone), row["device_span_s"][name] and
  row["device_kernels"][name] ([kernel, median us]), and the queued calls' row["device_busy_queued_s"][name] and
  row["device_kernels_queued"][name] (or row["device_queued_error"][name]): kernels.add_device_span."""
  try:
    row["times_s"][name] = kb.timeit(fn, arg_sets)
  except Exception as err:  # noqa: BLE001 - one failing variant must not stop the others
    row["times_s"][name] = None
    row["errors"][name + "_failed"] = repr(err)[:300]
    return
  rec = {}
  kb.add_device_span(rec, fn, arg_sets)
  for key in ("device_busy_s", "device_span_s", "device_kernels", "device_split", "device_busy_queued_s",
              "device_kernels_queued", "device_queued_error"):
    if key in rec:
      row.setdefault(key, {})[name] = rec[key]
  if "device_span_error" in rec:
    row["errors"][name + "_device_span_failed"] = rec["device_span_error"]


def span_note(row, name):
  busy = row.get("device_busy_s", {})
  return f" (device busy {busy[name]:.3e}: {row['device_kernels'].get(name)})" if name in busy else ""


def bench_moe(tokens, smoke, rows, flush, every_config=True, num_configs=0,
              variants=MOE_VARIANTS):
  """Rows of the MoE at these token counts (every_config: every read config at the first count; otherwise, and
  after it, the first config only: each pair visited is straight-line code, so the compile grows with the
  tokens)."""
  e, d, inter, group, all_cfgs = moe_shape(smoke)
  all_cfgs = all_cfgs[:num_configs or None]
  experts = kb.moe_inputs(0, 1, e, d, inter)[3:]
  per_expert = 3 * inter * d // 2 + 3 * inter * (d // group) * 2
  for mi, m in enumerate(tokens):
    cfgs = all_cfgs if mi == 0 and every_config else all_cfgs[:1]
    sets = [kb.moe_inputs(m + 100 * i + 1, m, e, d, inter)[:3] + experts
            for i in range(1 if smoke else 4)]
    args = sets[0]
    hit = int(jnp.unique(args[1][:, 0]).shape[0])
    row = dict(kind="moe", tokens=m, experts_hit=hit, bytes=hit * per_expert, times_s={}, errors={})
    rows.append(row)
    row["harness_s"] = kb.harness_floor(sets)
    ids_sets = [(a[0], a[1]) + a[3:] for a in sets]            # the read kernels take (x, ids, experts...)
    fns = {"dispatch": functools.partial(routed_experts_int4, expert_offset=0,
                                         impl="pallas_interpret" if smoke else "pallas"),
           "xla_read": xla_read}
    wants = {variant: moe_read_reference(*ids_sets[0], variant=variant) for variant in variants}  # config-free
    for ci, cfg in enumerate(cfgs):
      for variant in variants:
        name = variant + ("" if ci == 0 else f"@{ci}")
        fn = functools.partial(moe_read, variant=variant, cfg=cfg, interpret=smoke)
        try:
          got = jax.block_until_ready(jax.jit(fn)(*ids_sets[0]))
          row["errors"][name] = kb.rel_err(got, wants[variant])
        except Exception as err:  # noqa: BLE001 - a variant that does not lower must not stop the others
          row["errors"][name] = float("nan")
          row["errors"][name + "_failed"] = repr(err)[:300]
        kb.log(f"moe tokens={m} {name}: error {row['errors'][name]:.1e}")
        if row["errors"][name] < 1e-4:                   # NaN (a wait that gave up) or wrong: not timed
          fns[name] = fn
    row["configs"] = cfgs
    for name, fn in fns.items():
      time_variant(row, name, fn, sets if name == "dispatch" else ids_sets)
      kb.log(f"moe tokens={m} {name}: {row['times_s'][name]}{span_note(row, name)}")
    flush()
  return rows


# ---------------------------------------------------------------------------------------------------- MLA
def _mla_read_kernel(ckv_ref, kpe_ref, x_ref, o_ref, lse_ref, *, block_k, blocks_per_split):
  """Program (b, j): keys [j*BPS*BK, (j+1)*BPS*BK): ones[16, BK] @ ckv block and @ kpe block on the tensor cores
  (f32), -> o[b, j] [16, R] (+ the kpe sums and x), lse[b, j] [16]."""
  b, j = pl.program_id(0), pl.program_id(1)
  r, p = ckv_ref.shape[2], kpe_ref.shape[2]
  ones = jnp.ones((16, block_k), ckv_ref.dtype)

  def step(i, acc):
    a_c, a_p = acc
    k0 = (j * blocks_per_split + i) * block_k
    a_c += plgpu.dot(ones, ckv_ref[b, pl.ds(k0, block_k), :])
    a_p += plgpu.dot(ones, kpe_ref[b, pl.ds(k0, block_k), :])
    return a_c, a_p

  a_c, a_p = lax.fori_loop(0, blocks_per_split, step,
                           (jnp.zeros((16, r), jnp.float32), jnp.zeros((16, p), jnp.float32)))
  extra = jnp.sum(a_p, axis=1) * 1e-3 + x_ref[b, 0].astype(jnp.float32)      # [16]
  o_ref[b, j, :, :] = a_c * 1e-3 + extra[:, None]
  lse_ref[b, j, :] = extra * 1e-3


def mla_read(q_lat, ckv, kpe, *, num_splits, block_k=64, combine, interpret=False):
  """The MLA read kernels: [B, NS, 16, R] partials (and their combine when combine) -> f32 [B, 16, R]."""
  bsz, s_len, r = ckv.shape
  bps = s_len // (num_splits * block_k)
  if bps * num_splits * block_k != s_len:
    raise ValueError(f"mla_read: {s_len} keys are not {num_splits} splits of whole {block_k}-key blocks")
  x = q_lat.reshape(bsz, -1)
  o, lse = pl.pallas_call(
      functools.partial(_mla_read_kernel, block_k=block_k, blocks_per_split=bps), grid=(bsz, num_splits),
      out_shape=(jax.ShapeDtypeStruct((bsz, num_splits, 16, r), jnp.float32),
                 jax.ShapeDtypeStruct((bsz, num_splits, 16), jnp.float32)),
      compiler_params=plgpu.CompilerParams(num_warps=4, num_stages=2), interpret=interpret, name="sol_mla_read",
  )(ckv, kpe, x)
  if combine:
    return combine_partials(o, lse, combine="pallas", out_dtype=jnp.float32, interpret=interpret)
  return o[:, 0]


def mla_read_reference(q_lat, ckv, kpe, *, num_splits):
  """XLA: split 0's partials of mla_read(combine=False) (the check of the kernel's sums)."""
  bsz, s_len, _ = ckv.shape
  keys = s_len // num_splits
  f32 = jnp.float32
  a_c = jnp.sum(ckv[:, :keys].astype(f32), axis=1)                              # [B, R]
  extra = jnp.sum(kpe[:, :keys].astype(f32), axis=(1, 2)) * 1e-3 + q_lat.reshape(bsz, -1)[:, 0].astype(f32)
  return jnp.broadcast_to((a_c * 1e-3 + extra[:, None])[:, None, :], (bsz, 16, ckv.shape[2]))


def mla_xla_read(q_lat, ckv, kpe):
  """XLA's reduction of the cache over keys. The cache is scaled by 1 + isnan(q) (1 on the harness's finite
  inputs) so that the reduction sits on the harness's chain (see xla_read)."""
  f32 = jnp.float32
  k = 1.0 + jnp.isnan(q_lat.reshape(q_lat.shape[0], -1)[:, :1, None]).astype(f32)     # [B, 1, 1]
  return (jnp.sum(ckv.astype(f32) * k, axis=1) + jnp.sum(kpe.astype(f32) * k, axis=(1, 2))[:, None]
          + q_lat.reshape(q_lat.shape[0], -1)[:, :1].astype(f32))


def bench_mla(contexts, heads, smoke, rows, flush):
  for s in contexts:
    dims = (64, 32) if smoke else (512, 64)
    set_bytes = s * (dims[0] + dims[1]) * 2
    n_sets = 1 if smoke else int(min(8, max(1, math.ceil(300e6 / set_bytes))))
    sets = [kb.mla_inputs(7 + i + s, 1, 1, heads, s, *dims) for i in range(n_sets)]
    splits = default_num_splits(1, heads, s, block_m=16, block_k=64)
    while s % (splits * 64):
      splits -= 1
    row = dict(kind="mla", heads=heads, ctx=s, bytes=set_bytes, splits=splits, times_s={}, errors={})
    rows.append(row)
    row["harness_s"] = kb.harness_floor(sets)
    read_sets = [(a[0], a[2], a[3]) for a in sets]
    fns = {"dispatch": functools.partial(mla_attention, scale=kb.SCALE, impl="pallas_interpret" if smoke else "auto"),
           "xla_read": mla_xla_read}
    for name, combine in (("read", False), ("read_combine", True)):
      fns[name] = functools.partial(mla_read, num_splits=splits, combine=combine, interpret=smoke)
    try:
      got = jax.block_until_ready(jax.jit(fns["read"])(*read_sets[0]))
      row["errors"]["read"] = kb.rel_err(got, mla_read_reference(*read_sets[0], num_splits=splits))
    except Exception as err:  # noqa: BLE001
      row["errors"]["read"] = float("nan")
      row["errors"]["read_failed"] = repr(err)[:300]
    if not row["errors"]["read"] < 1e-4:
      del fns["read"], fns["read_combine"]
    for name, fn in fns.items():
      time_variant(row, name, fn, sets if name == "dispatch" else read_sets)
      kb.log(f"mla 1x1x{heads}x{s} {name}: {row['times_s'][name]}{span_note(row, name)}")
    flush()
  return rows


def table(rows, copy_bw):
  """Markdown: us per call and fraction of bytes / copy_bw, per variant (and the device busy time's, where
  measured)."""
  lines = []
  for row in rows:
    roof = row["bytes"] / copy_bw
    shape = (f"MoE {row['tokens']} token(s), {row['experts_hit']} expert(s)" if row["kind"] == "moe"
             else f"MLA 1 x 1 x {row['heads']} x {row['ctx']}")
    busy = row.get("device_busy_s", {})
    cells = [f"{k} {v * 1e6:.1f} us ({roof / v:.2f})"
             + (f", busy {busy[k] * 1e6:.1f} us ({roof / busy[k]:.2f})" if k in busy else "")
             for k, v in row["times_s"].items() if v]
    lines.append(f"| {shape} | {row['bytes'] / 1e6:.1f} MB, {roof * 1e6:.1f} us | harness "
                 f"{row['harness_s'] * 1e6:.1f} us | " + "; ".join(cells) + " |")
  return "\n".join(lines)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--smoke", action="store_true", help="tiny shapes in the Pallas interpreter (CPU)")
  ap.add_argument("--moe_tokens", default="1,2,4", help="token counts of the MoE rows ('' for none)")
  ap.add_argument("--mla_ctx", default="8192,32768", help="contexts of the batch-1 decode rows ('' for none)")
  ap.add_argument("--mla_heads", type=int, default=8)
  ap.add_argument("--moe_configs", type=int, default=0, help="time only the first N read configs (0: all)")
  ap.add_argument("--moe_variants", default=",".join(MOE_VARIANTS), help="the MoE read variants to time")
  ap.add_argument("--out", default=None, help="JSON path (default $OUT/speed_of_light.json)")
  ap.add_argument("--device_span", type=int, default=0, metavar="N",
                  help="also each variant's device time of one call (device_span.py, N traced blocking calls; the "
                       "harness's add and reduction not in it). Needs a GPU")
  a = ap.parse_args(argv)
  kb.enable_device_span(a.device_span, a.smoke, "--device_span")
  if a.smoke:
    kb.QUEUED = 1
  ints = lambda s: [int(v) for v in s.split(",") if v]
  copy_bw, mm = kb.roofline(a.smoke)
  rows = []
  out = a.out or os.path.join(os.environ.get("OUT", "."), "speed_of_light.json")
  doc = dict(smoke=a.smoke, date=time.strftime("%Y-%m-%d"), device=str(jax.devices()[0].device_kind),
             copy_bw_Bps=copy_bw, bf16_matmul_flops=mm, rows=rows)
  flush = lambda: write_json(out, doc)                 # after every row: a run cut short keeps what it timed
  moe_tokens = [1, 2] if a.smoke else ints(a.moe_tokens)
  variants = tuple(v for v in a.moe_variants.split(",") if v)
  if set(variants) - set(MOE_VARIANTS):
    raise SystemExit(f"--moe_variants {a.moe_variants!r}: expected names among {', '.join(MOE_VARIANTS)}")
  # the first token count, then the decode rows, then the other token counts (most telling first)
  bench_moe(moe_tokens[:1], a.smoke, rows, flush, num_configs=a.moe_configs, variants=variants)
  bench_mla([1024] if a.smoke else ints(a.mla_ctx), a.mla_heads, a.smoke, rows, flush)
  bench_moe(moe_tokens[1:], a.smoke, rows, flush, every_config=False, variants=variants)
  flush()
  print(table(rows, copy_bw), flush=True)
  return rows


if __name__ == "__main__":
  main()
