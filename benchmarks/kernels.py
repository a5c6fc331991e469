"""Kernel benchmark: roofline, correctness and timing of the MLA and INT4 MoE Pallas kernels in ONE run.

  PYTHONPATH=. python3 benchmarks/kernels.py            # on the GPU; writes $OUT/kernels.json (+ table)
  PYTHONPATH=. python benchmarks/kernels.py --smoke     # tiny shapes, Pallas interpreter, CPU (a dry run)

1. Roofline: element-wise read+write bandwidth (bytes read + written) and a bf16 8192^3 matmul rate.
2. Every kernel config is checked against the XLA reference on fresh random inputs (||out-ref||/||ref||).
3. Timing (`timeit`, time_s): one compiled program chains several calls (the next call's first input depends
   on a full reduction of the previous output, so calls serialise and none is skipped; its own add + reduction
   per call are in the figure, harness_floor); rotating input sets keep data out of the 60 MB L2 where sizes
   allow. Each sample enqueues QUEUED programs and waits once, so host dispatch overlaps device work as in a
   serving loop (_per_call_median); blocking_s is the same program waited for after every run (the harness of
   rounds 2-5, host dispatch included). Per-call time = total / calls.
4. With --device-span N, also each call's device time alone (device_span.py: profiler traces of N blocking calls
   and of N queued calls; device_busy_s / device_busy_queued_s, the union of the call's kernels' intervals, and each
   kernel's duration), which holds neither the chain's add and reduction nor host dispatch.
Rooflines: MLA = max(bytes/copy_bw, flops/matmul_rate), flops = 2*B*T*H*ctx*(576+512), bytes = cache
(B*ctx*576*2) + queries + output. MoE = INT4 weights + scales of the experts hit / copy_bw (the
compute term 6*M*D*I / matmul_rate is printed too).
"""
from __future__ import annotations

import argparse
import functools
import json
import math
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from custom_calls.mla_attention import mla_attention
from custom_calls.mla_attention.mosaic_gpu import default_num_splits as mosaic_num_splits
from custom_calls.mla_attention.mosaic_gpu import mla_attention_mosaic, reserve_cpu_threads_for_interpret
from custom_calls.mla_attention.pallas_triton import mla_attention_pallas
from custom_calls.mla_attention.reference import mla_attention_reference, visibility_mask
from custom_calls.moe_int4 import routed_experts_int4
from custom_calls.moe_int4.mosaic_experts import routed_experts_int4_mosaic
from custom_calls.moe_int4.mosaic_down_prewait import routed_experts_int4_prewait_down
from custom_calls.moe_int4.mosaic_layout import down_to_mosaic_layout, to_mosaic_layout
from custom_calls.moe_int4.pallas_gemv import routed_experts_int4_gemv
from custom_calls.moe_int4.pallas_gemv_pipelined import routed_experts_int4_gemv_pipelined
from custom_calls.moe_int4.pallas_triton_pipelined import routed_experts_int4_grouped_one_launch
from custom_calls.moe_int4.pallas_triton import combine, default_blocks, route
from custom_calls.moe_int4.pallas_triton import routed_experts_int4_pallas
from custom_calls.moe_int4.k_chunks import experts_to_k_chunks
from custom_calls.moe_int4.nibbles import activation_planes
from custom_calls.moe_int4.reference import routed_experts_int4_reference
from custom_calls.moe_int4.layout import dequantize_int4
from custom_calls.random_inputs import ancestor_masks, random_int4_experts

SCALE = 0.14468
T0 = time.time()
RESULTS = {"roofline": {}, "mla": [], "moe": [], "errors": []}


def log(*a):
  print(f"[{time.time() - T0:7.1f}s]", *a, flush=True)


def over_budget(budget_s):
  """The run's time budget is spent. Checked before every shape or row and before every config of one (each
  costs seconds of compile), so that a run ends before an outer timeout with what was timed logged and kept."""
  return time.time() - T0 > budget_s


# Programs queued back to back per timing sample (see _per_call_median). --smoke sets 1: a Mosaic GPU kernel in
# interpret mode needs the CPU client's threads for itself (custom_calls/mla_attention/mosaic_gpu.py).
QUEUED = 8
SMOKE_K26_SHAPE = (1, 4, 16, 256)   # (B, T, H, ctx) of the --smoke MLA shape with K2.6's R 512 / P 64


def _per_call_median(run, args, calls, reps):
  """(queued, blocking) median seconds per call of the compiled program `run(args)` that makes `calls` calls.

  queued: each sample enqueues QUEUED runs of the program and waits once, so the host's dispatch of a run
  (~0.1-0.3 ms for a program with dozens of arguments on the H200 machine) overlaps the device's work on the
  previous one, as in a serving loop; only the first dispatch of a sample is exposed (1/QUEUED of it).
  blocking: each sample is one run waited for (the harness of rounds 2-5: dispatch + device time)."""
  jax.block_until_ready(run(args))
  jax.block_until_ready(run(args))
  blocking, queued = [], []
  for _ in range(reps):
    t = time.perf_counter()
    jax.block_until_ready(run(args))
    blocking.append(time.perf_counter() - t)
    t = time.perf_counter()
    jax.block_until_ready([run(args) for _ in range(QUEUED)])
    queued.append((time.perf_counter() - t) / QUEUED)
  return statistics.median(queued) / calls, statistics.median(blocking) / calls


def timeit(fn, arg_sets, reps=5, calls=None, with_blocking=False):
  """Median seconds per call of fn over a chain of calls cycling through the arg sets (queued samples; with
  with_blocking also the blocking figure, see _per_call_median).

  One compiled program runs `calls` calls (default: 16, or 4 when one call takes > 2 ms); the next call's
  first input depends on a full reduction of the previous output, so calls serialise and none is skipped,
  and the dispatch of the program is spread over all of them."""
  def make(n_calls):
    @jax.jit
    def chain(sets):
      c = jnp.zeros((), jnp.float32)
      for i in range(n_calls):
        a = sets[i % len(sets)]
        o = fn(a[0] + c.astype(a[0].dtype), *a[1:])
        c = jnp.sum(o.astype(jnp.float32)) * 0.0
      return c
    return chain
  if calls is None:
    # one call of fn alone (the program the callers' correctness check has already compiled: a Mosaic GPU
    # kernel costs ~10 s of compile per program holding it, so no separate calibration chain is built)
    single = jax.jit(fn)
    single(*arg_sets[0]).block_until_ready()
    t = time.perf_counter(); single(*arg_sets[0]).block_until_ready()
    calls = 16 if time.perf_counter() - t < 2e-3 else 4
    calls = max(calls, len(arg_sets))
  queued, blocking = _per_call_median(make(calls), arg_sets, calls, reps)
  return (queued, blocking) if with_blocking else queued


def harness_floor(arg_sets):
  """timeit's own cost per call (the chain's add and full reduction around an identity call) for these inputs:
  part of every time measured with them, not of the kernel."""
  return timeit(lambda x: x, [a[:1] for a in arg_sets])


# --device-span N: also the device time of one call, from profiler traces of N blocking and N queued calls
# (device_span.py; about twice one trace's time per figure).
DEVICE_SPAN_CALLS = 0


def add_device_span(rec, fn, arg_sets):
  """With --device-span N, rec gains device_busy_s (the GPU time of one call's kernels, the harness's add and
  reduction not in it: the figure set against the roofline), device_span_s (first kernel start to last kernel end,
  host launch gaps included: device_span.py) and device_kernels ([name, median us] in launch order), from blocking
  calls; and device_busy_queued_s / device_kernels_queued from the same calls queued back to back (or
  device_queued_error where the trace cannot tell queued calls apart)."""
  if not DEVICE_SPAN_CALLS:
    return ""
  import device_span
  try:
    d = device_span.device_span(fn, arg_sets, DEVICE_SPAN_CALLS)
  except Exception as e:  # noqa: BLE001 - recorded next to the chained figure, which stands without it
    rec["device_span_error"] = repr(e)[:300]
    return f" device span failed: {e!r}"[:200]
  rec.update(device_span_s=d["span_s"], device_busy_s=d["busy_s"], device_kernels=d.get("kernels"),
             device_split=d.get("split"))
  note = ""
  try:     # the same calls queued: their kernels back to back, as in the chain (device_span.py, queued)
    per_call = int(d["n_kernels"]) if d["n_kernels"] == int(d["n_kernels"]) else None
    q = device_span.device_span(fn, arg_sets, DEVICE_SPAN_CALLS, queued=True, kernels_per_call=per_call)
    rec.update(device_busy_queued_s=q["busy_s"], device_kernels_queued=q.get("kernels"))
    note = f", queued busy {q['busy_s'] * 1e3:.4f}"
  except Exception as e:  # noqa: BLE001 - the blocking figure stands without it
    rec["device_queued_error"] = repr(e)[:300]
  return (f" device busy {d['busy_s'] * 1e3:.4f} ms (span {d['span_s'] * 1e3:.4f}, {d['n_kernels']:.0f} kernels"
          f"{note})")


def enable_device_span(calls, smoke, flag):
  """Turn add_device_span on for this process (calls > 0: traced blocking calls per figure); exits naming `flag`
  where it cannot run (it reads the trace's GPU plane)."""
  global DEVICE_SPAN_CALLS
  if calls and (smoke or jax.default_backend() != "gpu"):
    raise SystemExit(f"{flag} {calls}: needs a GPU (it reads the trace's /device:GPU:0 plane); "
                     f"backend {jax.default_backend()}{', --smoke' if smoke else ''}")
  DEVICE_SPAN_CALLS = calls


def rel_err(out, ref):
  out = np.asarray(jnp.asarray(out, jnp.float32), np.float64)
  ref = np.asarray(jnp.asarray(ref, jnp.float32), np.float64)
  if not np.all(np.isfinite(out)):
    return float("nan")
  return float(np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30))


# ----------------------------------------------------------------------------------------------- roofline
def roofline(smoke):
  w = jnp.ones((1024, 1024), jnp.bfloat16)
  for _ in range(200):                                            # let the clocks ramp up first
    w = (w @ w) * 1e-3
  w.block_until_ready()
  n = (1 << 16) if smoke else (1 << 29)                          # 1 GiB of bf16
  x = jax.random.normal(jax.random.PRNGKey(0), (n,), jnp.bfloat16)
  f = jax.jit(lambda v: v * 1.5 + 1.0)
  f(x).block_until_ready()
  ts = []
  for _ in range(30):
    t = time.perf_counter(); f(x).block_until_ready(); ts.append(time.perf_counter() - t)
  copy_once = 2 * n * 2 / statistics.median(ts)
  # the same pass 10 times inside one program (no dispatch or host sync between passes)
  loop = jax.jit(lambda v: jax.lax.fori_loop(0, 10, lambda i, u: u * 1.5 + 1.0, v))
  loop(x).block_until_ready()
  ts = []
  for _ in range(10):
    t = time.perf_counter(); loop(x).block_until_ready(); ts.append(time.perf_counter() - t)
  copy_loop = 10 * 2 * n * 2 / statistics.median(ts)
  copy_bw = max(copy_once, copy_loop)
  RESULTS["roofline"].update(copy_once_Bps=copy_once, copy_loop_Bps=copy_loop)
  m = 512 if smoke else 8192
  a = jax.random.normal(jax.random.PRNGKey(1), (m, m), jnp.bfloat16)
  b = jax.random.normal(jax.random.PRNGKey(2), (m, m), jnp.bfloat16)
  # 5 dependent products in one program (scaled by 1/sqrt(m) so the values stay O(1))
  g = jax.jit(lambda a, b: jax.lax.fori_loop(0, 5, lambda i, c: ((c @ b) * (1.0 / math.sqrt(m))).astype(c.dtype), a))
  g(a, b).block_until_ready()
  ts = []
  for _ in range(10):
    t = time.perf_counter(); g(a, b).block_until_ready(); ts.append(time.perf_counter() - t)
  mm = 5 * 2 * m ** 3 / statistics.median(ts)
  RESULTS["roofline"].update(copy_bw_Bps=copy_bw, bf16_matmul_flops=mm)
  log(f"roofline: copy {copy_bw / 1e12:.2f} TB/s (one pass {copy_once / 1e12:.2f}, looped {copy_loop / 1e12:.2f}), "
      f"bf16 matmul {mm / 1e12:.0f} TFLOP/s")
  return copy_bw, mm


# ---------------------------------------------------------------------------------------------------- MLA


def mla_inputs(seed, b, t, h, s, r=512, p=64):
  ks = jax.random.split(jax.random.PRNGKey(seed), 4)
  q_lat = jax.random.normal(ks[0], (b, t, h, r), jnp.bfloat16)
  q_pe = jax.random.normal(ks[1], (b, t, h, p), jnp.bfloat16)
  ckv = jax.random.normal(ks[2], (b, s, r), jnp.bfloat16)
  kpe = jax.random.normal(ks[3], (b, s, p), jnp.bfloat16)
  cache_len = jnp.full((b,), s - t, jnp.int32)
  mask = jnp.asarray(ancestor_masks(np.random.default_rng(seed), b, t))
  return q_lat, q_pe, ckv, kpe, cache_len, mask


def mla_xla_bf16(q_lat, q_pe, ckv, kpe, cache_len, block_mask, *, scale):
  """Plain XLA absorbed attention on the bf16 cache (the baseline of REFERENCE.md section 4)."""
  f32 = jnp.float32
  s = jnp.einsum("bthr,bsr->bths", q_lat, ckv, preferred_element_type=f32)
  s += jnp.einsum("bthp,bsp->bths", q_pe, kpe, preferred_element_type=f32)
  vis = visibility_mask(cache_len, block_mask, ckv.shape[1])[:, :, None, :]
  s = jnp.where(vis, s * scale, -jnp.inf)
  p = jax.nn.softmax(s, axis=-1)
  return jnp.einsum("bths,bsr->bthr", p.astype(ckv.dtype), ckv, preferred_element_type=f32).astype(q_lat.dtype)


def bench_mla(copy_bw, mm, smoke, budget_s, only_shapes=None, no_sweep=False, mosaic_only=False, configs=None):
  """only_shapes: [(B, T, H, ctx)] to run instead of the full grid; no_sweep: the dispatch only (config
  kernel="default": custom_calls.mla_attention, impl auto); mosaic_only: the dispatch and the Mosaic GPU kernel;
  configs: these configs (after the dispatch) for every shape instead of the built-in sweep.
  Other configs: kernel="mosaic" (mosaic_gpu.py) or none (pallas_triton.py), with their keyword arguments."""
  if smoke:
    # R 64 / P 32 except the last shape, which has K2.6's latent dims so that the Mosaic kernel runs too
    shapes = [(1, 1, 8, 256), (1, 5, 8, 256), (2, 3, 4, 128), SMOKE_K26_SHAPE]
    sweep = {(1, 1, 8, 256): [dict(block_k=32, num_splits=4)],
             SMOKE_K26_SHAPE: [dict(kernel="mosaic", num_splits=2, partial_dtype="float32")]}
  else:
    # the grid, most important first (the budget cuts the tail): decode (memory-bound), then trees
    shapes = [(1, 1, 8, 131072), (1, 1, 64, 131072), (1, 1, 8, 32768), (1, 1, 64, 32768), (8, 1, 8, 32768),
              (1, 1, 8, 8192), (1, 257, 8, 32768), (1, 257, 64, 32768), (1, 64, 8, 32768), (1, 16, 64, 1024),
              (8, 16, 64, 4096), (1, 64, 64, 131072), (1, 257, 8, 131072), (1, 257, 64, 131072)]
    dec = lambda splits, **kw: [dict(num_splits=n, **kw) for n in splits]
    sweep = {
        (1, 1, 8, 131072): dec((264, 528, 1056)) + dec((528, 1056), num_stages=3) + dec((528,), block_k=32)
                           + dec((264,), block_k=128, num_warps=4) + dec((528,), num_stages=4),
        (1, 1, 64, 131072): dec((264, 528)) + dec((264,), num_stages=3) + dec((528,), block_k=32)
                            + dec((132,), block_m=32, num_warps=4),
        (1, 1, 8, 32768): dec((264, 528)) + dec((264,), num_stages=3),
        (1, 1, 64, 32768): dec((264, 528)) + dec((264,), num_stages=3),
        (8, 1, 8, 32768): dec((66, 132)) + dec((66,), num_stages=3),
        (1, 1, 8, 8192): dec((128, 256)),
        (1, 257, 64, 32768): [dict(block_m=64, block_k=32, num_warps=4), dict(block_m=64, block_k=64, num_warps=8,
                                                                              num_stages=3)],
        (1, 64, 8, 32768): [dict(block_m=64, block_k=32, num_warps=4), dict(num_splits=8), dict(num_splits=16)],
        (1, 257, 8, 32768): [dict(num_splits=2), dict(block_k=32, num_warps=4)],
    }
    # the Mosaic GPU (wgmma, two warpgroups) kernel, mosaic_gpu.py: its default split and twice / half that
    for shape in [(1, 257, 8, 32768), (1, 257, 64, 32768), (1, 64, 8, 32768), (8, 16, 64, 4096),
                  (1, 64, 64, 131072), (1, 1, 64, 131072), (1, 16, 64, 1024), (1, 257, 8, 131072)]:
      b, t, h, s = shape
      n = mosaic_num_splits(b, t * h, s)
      splits = sorted({n, 2 * n, max(1, n // 2)})
      sweep[shape] = [dict(kernel="mosaic", num_splits=k) for k in splits] + sweep.get(shape, [])
  if only_shapes:
    shapes = only_shapes
  if no_sweep:
    sweep = {}
  if configs:
    sweep = {shape: list(configs) for shape in shapes}
  if mosaic_only:
    sweep = {k: [c for c in v if c.get("kernel") == "mosaic"] for k, v in sweep.items()}
  interp = smoke
  for (b, t, h, s) in shapes:
    if over_budget(budget_s):
      RESULTS["errors"].append(f"mla {(b, t, h, s)}: skipped (time budget)")
      continue
    row = {"B": b, "T": t, "H": h, "ctx": s}
    RESULTS["mla"].append(row)          # in the JSON from now on, so that a run cut short keeps what it timed
    try:
      dims = (64, 32) if smoke and (b, t, h, s) != SMOKE_K26_SHAPE else (512, 64)    # R, P
      args = mla_inputs(b * 1000 + t * 10 + h + s, b, t, h, s, *dims)
      set_bytes = b * s * 576 * 2
      n_sets = 1 if smoke else int(min(8, max(1, math.ceil(300e6 / set_bytes))))
      sets = [args] + [mla_inputs(7 + i + s, b, t, h, s, *dims) for i in range(n_sets - 1)]
      bytes_ = set_bytes + 2 * b * t * h * (512 + 64) * 2
      flops = 2 * b * t * h * s * (576 + 512)
      roof = max(bytes_ / copy_bw, flops / mm)
      row.update(bytes=bytes_, flops=flops, roofline_s=roof,
                 bound="memory" if bytes_ / copy_bw > flops / mm else "compute")
      big = b * t * h * s * 4 > 12e9
      ref = (mla_xla_bf16 if big else mla_attention_reference)(*args, scale=SCALE)
      configs = [dict(kernel="default")] + sweep.get((b, t, h, s), [])
      best = None
      for cfg in configs:
        if over_budget(budget_s):
          row.setdefault("configs", []).append(dict(cfg=cfg, error="skipped (time budget)"))
          continue
        try:
          kw = {k: v for k, v in cfg.items() if k != "kernel"}
          if cfg.get("kernel") == "default":          # the dispatch the model runs
            fn = functools.partial(mla_attention, scale=SCALE, impl="pallas_interpret" if interp else "auto")
          elif cfg.get("kernel") == "mosaic":
            fn = functools.partial(mla_attention_mosaic, scale=SCALE, interpret=interp, **kw)
          else:
            fn = functools.partial(mla_attention_pallas, scale=SCALE, interpret=interp, **kw)
          err = rel_err(jax.block_until_ready(jax.jit(fn)(*args)), ref)   # waited for: see QUEUED
          dt, blocking = timeit(fn, sets, with_blocking=True)
          rec = dict(cfg=cfg, err=err, time_s=dt, blocking_s=blocking)
          add_device_span(rec, fn, sets)
          row.setdefault("configs", []).append(rec)
          if err < 2e-2 and (best is None or dt < best["time_s"]):
            best = rec
        except Exception as e:  # noqa: BLE001 - record and continue: one failing config must not stop the run
          row.setdefault("configs", []).append(dict(cfg=cfg, error=repr(e)[:400]))
        flush()
      try:
        row["xla_time_s"] = timeit(functools.partial(mla_xla_bf16, scale=SCALE), sets[:1] if big else sets, reps=3)
      except Exception as e:  # noqa: BLE001
        row["xla_error"] = repr(e)[:300]
      if best:
        row.update(best=best, time_s=best["time_s"], err=best["err"], frac_roofline=roof / best["time_s"],
                   achieved_Bps=bytes_ / best["time_s"], achieved_flops=flops / best["time_s"])
        if "device_busy_s" in best:
          row["frac_roofline_device_busy"] = roof / best["device_busy_s"]
        if "xla_time_s" in row:
          row["speedup_vs_xla"] = row["xla_time_s"] / best["time_s"]
      log(f"mla B={b} T={t} H={h} ctx={s}: " + ", ".join(
          f"{c['cfg']}: " + (f"{c['time_s'] * 1e3:.3f} ms (blocking {c['blocking_s'] * 1e3:.3f}) err {c['err']:.1e}"
                             + (f" device busy {c['device_busy_s'] * 1e3:.4f} ms" if "device_busy_s" in c else "")
                             if "time_s" in c else c["error"][:120])
          for c in row.get("configs", [])) + f" | xla {row.get('xla_time_s', float('nan')) * 1e3:.3f} ms")
    except Exception as e:  # noqa: BLE001
      row["error"] = repr(e)[:400]
      log(f"mla {(b, t, h, s)} failed: {e!r}"[:500])
    flush()


# ---------------------------------------------------------------------------------------------------- MoE
def moe_inputs(seed, m, e, d, inter, k=8, e_total=384):
  """m tokens, top-k over e_total global experts, exactly one local expert (of 0..e-1) per token => m local rows."""
  ks = jax.random.split(jax.random.PRNGKey(seed), 10)
  experts = random_int4_experts(ks[:6], e, d, inter)
  x = jax.random.normal(ks[6], (m, d), jnp.bfloat16)
  local = jax.random.randint(ks[7], (m, 1), 0, e)
  remote = jax.random.randint(ks[8], (m, k - 1), e, e_total)
  ids = jnp.concatenate([local, remote], axis=1).astype(jnp.int32)
  w = jax.random.uniform(ks[9], (m, k), jnp.float32, 0.05, 0.3)
  return (x, ids, w) + experts


def ragged_bf16_moe(x, ids, w, wg, wu, wd, *, e):
  """Baseline: sort + three bf16 jax.lax.ragged_dot (pre-dequantised weights [E, D, I], [E, I, D])."""
  n, k = ids.shape
  local = jnp.where(ids < e, ids, e).reshape(-1)
  order = jnp.argsort(local, stable=True)
  tok = order // k
  gs = jnp.bincount(local, length=e + 1)[:e].astype(jnp.int32)
  xs = x[tok]
  g = jax.lax.ragged_dot(xs, wg, gs, preferred_element_type=jnp.float32)
  u = jax.lax.ragged_dot(xs, wu, gs, preferred_element_type=jnp.float32)
  h = (jax.nn.silu(g) * u).astype(x.dtype)
  y = jax.lax.ragged_dot(h, wd, gs, preferred_element_type=jnp.float32)
  wt = jnp.where(local < e, w.reshape(-1), 0.0)[order]
  return jnp.zeros((n, x.shape[1]), jnp.float32).at[tok].add(y * wt[:, None]).astype(x.dtype)


MOE_KERNELS = {"gemv": routed_experts_int4_gemv,
               "gemv_pipelined": routed_experts_int4_gemv_pipelined,   # both parts in one launch; 4-6 tokens
               "grouped": routed_experts_int4_pallas,
               "grouped_one_launch": routed_experts_int4_grouped_one_launch,   # dispatched at 7-512 tokens
               "mosaic": routed_experts_int4_mosaic,     # tensor cores, <= 16 tokens; its own layout; not dispatched
               # gemv gate/up + Mosaic down, its first expert's words read before its wait; down in the Mosaic layout
               "prewait": routed_experts_int4_prewait_down}


def gemv_sweep(m):
  """pallas_gemv configs for M tokens: launch shapes at a few tokens, sorted runs of 1-8 rows above."""
  gv = lambda **kw: dict(kernel="gemv", **kw)
  launch = [gv(), gv(block_n=8), gv(block_n=2, block_n_down=4), gv(block_n_down=16), gv(num_warps=8),
            gv(num_warps=2), gv(block_k=512), gv(num_stages=3), gv(num_stages=1)]
  runs = lambda rs, **kw: [gv(sort_pairs=True, rows_per_run=r, **kw) for r in rs]
  if m <= 1:
    return [launch[0], launch[4], launch[1]] + launch[2:4] + launch[5:]
  if m <= 8:
    return [gv(), gv(num_warps=8)] + runs([2]) + launch[1:]
  if m <= 64:
    return runs([2]) + runs([4]) + runs([2], block_n=8) + runs([1]) + [gv(sort_pairs=False, rows_per_run=1)]
  if m <= 128:
    return runs([2, 4]) + runs([8], block_k=512) + runs([2, 4], block_n=8)
  return (runs([8], block_k=512) + runs([4]) + runs([16], block_k=256) + runs([4], block_n=8)
          + runs([4, 8], num_warps=8, block_k=512))


def grouped_sweep(m):
  """pallas_triton (grouped, tensor cores) configs for M tokens: the dispatch's default shape on the stored layout
  first (the best of the H200 runs, benchmarks/RESULTS.md), then the same shape on nibbles.py's float32 planes
  (before/after in one run), then the model's k-chunked layout (chunk 256, as Engine lays the experts out on a
  GPU), then other shapes."""
  g = lambda **kw: {**dict(planar=True, block_m=16, block_n=64, block_k=256, num_warps=4, num_stages=3), **kw}
  if m <= 8:
    return [g(block_n=32), g(block_n=32, exact_bf16=False), g(k_chunk=256), g(), g(block_n=16), g(block_k=512)]
  if m <= 512:
    return [g(block_n=128), g(block_n=128, exact_bf16=False), g(block_n=128, k_chunk=256), g(), g(block_m=32)]
  if m <= 1024:
    return [g(block_m=32), g(block_m=32, exact_bf16=False), g(block_m=32, block_n=128, k_chunk=256),
            g(block_n=128), g(block_m=32, block_n=128, num_warps=8)]
  return [g(block_m=64, block_n=128, block_k=128), g(block_m=64, block_n=128, block_k=128, exact_bf16=False),
          g(block_m=128, block_n=128, block_k=128, num_warps=8),
          dict(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=3)]


def moe_sweep(smoke):
  """{M rows: [config]}; config['kernel'] picks pallas_gemv or (default) pallas_triton."""
  if smoke:
    return [1, 8, 40], {1: [dict(kernel="gemv", block_k=128)],
                        8: [dict(block_m=16, block_n=32, block_k=64), dict(kernel="gemv", block_k=128, sort_pairs=True),
                            dict(block_m=16, block_n=32, block_k=128, planar=True)]}
  rows = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
  sweep = {}
  for m in rows:
    # pair_splits: a second grid axis over the pairs (and tokens), so that a few pairs still fill the GPU;
    # the unsplit 8-warp gemv first, then the split variants (at one token the first is that same config).
    split = lambda **kw: dict(kernel="gemv", pair_splits=min(m, 8), rows_per_run=1, **kw)
    variants = [dict(num_warps=8), dict(num_warps=4), dict(num_warps=8, block_n=8), dict(num_warps=8, num_stages=3)]
    few = [dict(kernel="gemv", num_warps=8, pair_splits=1)] + [split(**v) for v in variants[1 if m == 1 else 0:]]
    grouped = grouped_sweep(m)
    sweep[m] = grouped[:1] + few + grouped[1:] + gemv_sweep(m)[2:] if m <= 32 else grouped
  return rows, sweep


def bench_moe(copy_bw, mm, smoke, budget_s, rows=None, kernels=None, baselines=True, max_configs=0, configs=None):
  """rows: the M values to run (default: all of the sweep); kernels: which families of the sweep to time
  (default all; 'default' = the dispatch's defaults); baselines: time ragged_dot and the XLA reference too;
  configs: these configs (after the dispatch's default) at every row count instead of the built-in sweep
  (then `kernels` and `max_configs` do not apply)."""
  if smoke:
    e, d, inter = 6, 256, 128
  else:
    e, d, inter = 48, 7168, 2048
  ms, sweep = moe_sweep(smoke)
  if rows:
    ms = rows
  if kernels:
    sweep = {m: [c for c in cfgs if c.get("kernel", "grouped") in kernels] for m, cfgs in sweep.items()}
  if max_configs:
    sweep = {m: cfgs[:max_configs] for m, cfgs in sweep.items()}
  if configs:
    sweep = {m: list(configs) for m in ms}
  base = moe_inputs(0, max(ms), e, d, inter)
  experts = base[3:]
  # bf16 weights for the ragged_dot baseline: [E, D, I] gate/up, [E, I, D] down.
  wg = jnp.swapaxes(dequantize_int4(experts[0], experts[1]), 1, 2)
  wu = jnp.swapaxes(dequantize_int4(experts[2], experts[3]), 1, 2)
  wd = jnp.swapaxes(dequantize_int4(experts[4], experts[5]), 1, 2)
  per_expert_bytes = 3 * inter * d // 2 + 3 * inter * (d // 32) * 2
  chunked_experts = {}

  def k_chunked(chunk):                             # made once per chunk size, then shared by every row count
    if chunk not in chunked_experts:
      chunked_experts[chunk] = jax.block_until_ready(experts_to_k_chunks(experts, chunk))
    return chunked_experts[chunk]

  def mosaic_layout(wgmma_order):                   # mosaic_layout.py's arrays, made once per column order
    if ("mosaic", wgmma_order) not in chunked_experts:
      chunked_experts["mosaic", wgmma_order] = (jax.block_until_ready(to_mosaic_layout(*experts,
                                                                                       wgmma_order=wgmma_order)),)
    return chunked_experts["mosaic", wgmma_order]

  def mosaic_down(wgmma_order):                     # the down half of it alone (the prewait kernel's)
    if ("down", wgmma_order) not in chunked_experts:
      chunked_experts["down", wgmma_order] = jax.block_until_ready(
          down_to_mosaic_layout(*experts[4:], wgmma_order=wgmma_order))
    return chunked_experts["down", wgmma_order]
  for m in ms:
    if over_budget(budget_s):
      RESULTS["errors"].append(f"moe M={m}: skipped (time budget)")
      continue
    row = {"M": m, "E": e, "D": d, "I": inter}
    RESULTS["moe"].append(row)          # in the JSON from now on, so that a run cut short keeps what it timed
    try:
      sub = moe_inputs(m + 1, m, e, d, inter)
      args = sub[:3] + experts
      # rotate routings so that the experts of one call are not still in the 60 MB L2 at the next
      n_sets = 1 if smoke or m >= 64 else 4
      arg_sets = [args] + [moe_inputs(m + 100 * i, m, e, d, inter)[:3] + experts for i in range(1, n_sets)]
      hit = int(jnp.unique(sub[1][:, 0]).shape[0])
      bytes_ = hit * per_expert_bytes
      flops = 6 * m * d * inter
      row.update(experts_hit=hit, bytes=bytes_, flops=flops, roofline_mem_s=bytes_ / copy_bw,
                 roofline_s=max(bytes_ / copy_bw, flops / mm))
      ref = routed_experts_int4_reference(*args, expert_offset=0)
      row["harness_floor_s"] = harness_floor(arg_sets)        # recorded to be read next to the fractions
      best = None
      with_default = not kernels or "default" in kernels or bool(configs)
      for cfg in ([dict(kernel="default")] if with_default else []) + sweep.get(m, []):
        if over_budget(budget_s):
          row.setdefault("configs", []).append(dict(cfg=cfg, error="skipped (time budget)"))
          continue
        try:
          # JSON lists become tuples (hashable static arguments, e.g. gemv's nibble4_in_place pair)
          kw = {k: tuple(v) if isinstance(v, list) else v for k, v in cfg.items() if k not in ("kernel", "k_chunk")}
          # k_chunk C: the same expert arrays in the k-chunked layout (custom_calls/moe_int4/k_chunks.py)
          cfg_args, cfg_sets = args, arg_sets
          if cfg.get("k_chunk"):
            ck = k_chunked(cfg["k_chunk"])
            cfg_args, cfg_sets = args[:3] + ck, [a_[:3] + ck for a_ in arg_sets]
          if cfg.get("kernel") == "mosaic":
            mz = mosaic_layout(bool(cfg.get("wgmma_order")))
            cfg_args, cfg_sets = args[:3] + mz, [a_[:3] + mz for a_ in arg_sets]
          if cfg.get("kernel") == "prewait":           # gate/up as above (stored or k_chunk), down as Mosaic's
            dz = mosaic_down(bool(cfg.get("wgmma_order")))
            cfg_args, cfg_sets = cfg_args[:7] + dz, [a_[:7] + dz for a_ in cfg_sets]
          if cfg.get("kernel") == "default":           # what the model runs: routed_experts_int4's choice
            fn = functools.partial(routed_experts_int4, expert_offset=0,
                                   impl="pallas_interpret" if smoke else "pallas")
          else:
            fn = functools.partial(MOE_KERNELS[cfg.get("kernel", "grouped")], expert_offset=0, interpret=smoke, **kw)
          err = rel_err(jax.block_until_ready(jax.jit(fn)(*cfg_args)), ref)   # waited for: see QUEUED
          dt, blocking = timeit(fn, cfg_sets, with_blocking=True)
          rec = dict(cfg=cfg, err=err, time_s=dt, blocking_s=blocking)
          span = add_device_span(rec, fn, cfg_sets)
          row.setdefault("configs", []).append(rec)
          log(f"  moe M={m} {cfg}: {dt * 1e3:.4f} ms (blocking {blocking * 1e3:.4f}) err {err:.1e}{span}")
          if err < 2e-2 and (best is None or dt < best["time_s"]):
            best = rec
        except Exception as e_:  # noqa: BLE001
          row.setdefault("configs", []).append(dict(cfg=cfg, error=repr(e_)[:400]))
        flush()
      if baselines:
        try:
          row["ragged_bf16_s"] = timeit(functools.partial(ragged_bf16_moe, e=e), [sub[:3] + (wg, wu, wd)], reps=3)
          row["ragged_bf16_err"] = rel_err(jax.jit(functools.partial(ragged_bf16_moe, e=e))(*sub[:3], wg, wu, wd),
                                           ref)
        except Exception as e_:  # noqa: BLE001
          row["ragged_error"] = repr(e_)[:300]
        try:
          row["xla_ref_s"] = timeit(functools.partial(routed_experts_int4_reference, expert_offset=0), [args], reps=3)
        except Exception as e_:  # noqa: BLE001
          row["xla_ref_error"] = repr(e_)[:300]
      if best:
        row.update(best=best, time_s=best["time_s"], err=best["err"],
                   frac_mem_roofline=(bytes_ / copy_bw) / best["time_s"],
                   frac_roofline=row["roofline_s"] / best["time_s"], achieved_Bps=bytes_ / best["time_s"],
                   achieved_flops=flops / best["time_s"])
        if "device_busy_s" in best:
          row["frac_mem_roofline_device_busy"] = (bytes_ / copy_bw) / best["device_busy_s"]
        if "ragged_bf16_s" in row:
          row["speedup_vs_ragged_bf16"] = row["ragged_bf16_s"] / best["time_s"]
      log(f"moe M={m} hit={hit}: " + ", ".join(
          f"{c['cfg']}: " + (f"{c['time_s'] * 1e3:.3f} ms (blocking {c['blocking_s'] * 1e3:.3f}) err {c['err']:.1e}"
                             if "time_s" in c else c["error"][:160])
          for c in row.get("configs", [])) +
          f" | harness floor {row['harness_floor_s'] * 1e3:.4f} ms"
          f" | ragged bf16 {row.get('ragged_bf16_s', float('nan')) * 1e3:.3f} ms"
          f" | xla ref {row.get('xla_ref_s', float('nan')) * 1e3:.3f} ms")
    except Exception as e_:  # noqa: BLE001
      row["error"] = repr(e_)[:400]
      log(f"moe M={m} failed: {e_!r}"[:500])
    flush()


def bench_moe_parts(smoke):
  """Where the time of the grouped path goes at few tokens, each part timed alone in the same chained harness:
  the harness itself (an identity call), the routing (argsort + scatters, or ranks by comparisons), the
  activation planes, the combine, and the whole dispatched call."""
  e, d, inter = (6, 256, 128) if smoke else (48, 7168, 2048)
  experts = moe_inputs(0, 1, e, d, inter)[3:]
  for m in ([1, 8] if smoke else [1, 8, 32, 128]):
    row = {"M": m}
    try:
      subs = [moe_inputs(m + 100 * i, m, e, d, inter) for i in range(1 if smoke or m >= 64 else 4)]
      bm = default_blocks(m, e)[0]
      row["floor_s"] = harness_floor(subs)
      for by_rank in (False, True):
        def route_only(x, ids, by_rank=by_rank):       # ids depend on the chain, so calls cannot be merged
          outs = route(ids + (x[0, 0] * 0).astype(jnp.int32), e, 0, bm, by_rank=by_rank)
          return sum(jnp.sum(o.astype(jnp.float32)) for o in outs)
        row["route_rank_s" if by_rank else "route_sort_s"] = timeit(route_only, [s_[:2] for s_ in subs])
      row["planes_s"] = timeit(lambda x: activation_planes(x, prescaled=False), [s_[:1] for s_ in subs])
      r = route(subs[0][1], e, 0, bm)
      y = jax.random.normal(jax.random.PRNGKey(m), (r[0].shape[0], d), jnp.float32)
      row["combine_s"] = timeit(lambda y_, pos, loc, w: combine(y_, pos, loc, w, jnp.bfloat16),
                                [(y, r[1], r[2], subs[0][2])])
      row["total_s"] = timeit(functools.partial(routed_experts_int4, expert_offset=0,
                                                impl="pallas_interpret" if smoke else "pallas"),
                              [s_[:3] + experts for s_ in subs])
      log(f"moe parts M={m}: " + ", ".join(f"{k_[:-2]} {v * 1e3:.4f} ms" for k_, v in row.items() if k_.endswith("_s")))
    except Exception as e_:  # noqa: BLE001
      row["error"] = repr(e_)[:400]
      log(f"moe parts M={m} failed: {e_!r}"[:500])
    RESULTS.setdefault("moe_parts", []).append(row)
    flush()


# ------------------------------------------------------------------------------------------------- output
OUT = os.environ.get("OUT", "/tmp")


def flush():
  with open(os.path.join(OUT, "kernels.json"), "w") as f:
    json.dump(RESULTS, f, indent=1, default=str)


def table():
  lines = []
  rf = RESULTS["roofline"]
  lines.append(f"device: {jax.devices()[0].device_kind}; copy {rf['copy_bw_Bps'] / 1e12:.2f} TB/s; "
               f"bf16 matmul {rf['bf16_matmul_flops'] / 1e12:.0f} TFLOP/s")
  busy = lambda r, frac: (f"{r['best']['device_busy_s'] * 1e3:.4f} ({r[frac]:.2f})" if frac in r else "-")
  lines.append("| MLA B | T | H | ctx | bound | roofline ms | pallas ms | frac roofline | blocking ms | TB/s | TFLOP/s "
               "| XLA bf16 ms | speedup | err | device busy ms (frac) | best cfg |")
  lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
  for r in RESULTS["mla"]:
    if "time_s" not in r:
      lines.append(f"| {r['B']} | {r['T']} | {r['H']} | {r['ctx']} | failed: {r.get('error', r.get('configs'))} |")
      continue
    lines.append(f"| {r['B']} | {r['T']} | {r['H']} | {r['ctx']} | {r['bound']} | {r['roofline_s'] * 1e3:.3f} | "
                 f"{r['time_s'] * 1e3:.3f} | {r['frac_roofline']:.2f} | {r['best']['blocking_s'] * 1e3:.3f} | "
                 f"{r['achieved_Bps'] / 1e12:.2f} | "
                 f"{r['achieved_flops'] / 1e12:.0f} | {r.get('xla_time_s', float('nan')) * 1e3:.3f} | "
                 f"{r.get('speedup_vs_xla', float('nan')):.1f}x | {r['err']:.1e} | "
                 f"{busy(r, 'frac_roofline_device_busy')} | {r['best']['cfg']} |")
  lines.append("| MoE M rows | experts hit | mem roofline ms | pallas ms | frac mem roofline | blocking ms "
               "| harness floor ms | TB/s | ragged bf16 ms | speedup | XLA ref ms | err | device busy ms (frac) "
               "| best cfg |")
  lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
  for r in RESULTS["moe"]:
    if "time_s" not in r:
      lines.append(f"| {r['M']} | failed: {r.get('error', r.get('configs'))} |")
      continue
    lines.append(f"| {r['M']} | {r['experts_hit']} | {r['roofline_mem_s'] * 1e3:.3f} | {r['time_s'] * 1e3:.3f} | "
                 f"{r['frac_mem_roofline']:.2f} | {r['best']['blocking_s'] * 1e3:.3f} | "
                 f"{r['harness_floor_s'] * 1e3:.4f} | {r['achieved_Bps'] / 1e12:.2f} | "
                 f"{r.get('ragged_bf16_s', float('nan')) * 1e3:.3f} | "
                 f"{r.get('speedup_vs_ragged_bf16', float('nan')):.1f}x | "
                 f"{r.get('xla_ref_s', float('nan')) * 1e3:.3f} | {r['err']:.1e} | "
                 f"{busy(r, 'frac_mem_roofline_device_busy')} | {r['best']['cfg']} |")
  return "\n".join(lines)


def main():
  global QUEUED
  ap = argparse.ArgumentParser()
  ap.add_argument("--smoke", action="store_true", help="tiny shapes, Pallas interpreter (CPU dry run)")
  ap.add_argument("--only", choices=["mla", "moe", "moe_parts", "all"], default="all")
  ap.add_argument("--moe-rows", default="", help="MoE: comma-separated token counts (default: the whole sweep)")
  ap.add_argument("--moe-kernels", default="", help="MoE: kernel families to time, e.g. gemv,default")
  ap.add_argument("--mla-shapes", default="", help="MLA: 'B,T,H,ctx;...' instead of the full grid")
  ap.add_argument("--mla-no-sweep", action="store_true",
                  help="MLA: the dispatched kernel (custom_calls.mla_attention, impl auto) only")
  ap.add_argument("--mla-mosaic", action="store_true",
                  help="MLA: the dispatched default and the Mosaic GPU kernel (mosaic_gpu.py, its split sweep) only")
  ap.add_argument("--mla-configs", default="",
                  help='MLA: a JSON list of configs timed at every shape after the dispatch, e.g. '
                       '\'[{"kernel": "mosaic", "partial_dtype": "float32"}]\' ("kernel" and the kernel\'s '
                       'keyword arguments)')
  ap.add_argument("--moe-configs", default="",
                  help='MoE: a JSON list of configs timed at every row count after the dispatch, e.g. '
                       '\'[{"kernel": "gemv", "block_k": 512}]\' ("kernel": gemv, gemv_pipelined, grouped, '
                       'grouped_one_launch, mosaic or prewait, and its keyword '
                       'arguments)')
  ap.add_argument("--moe-max-configs", type=int, default=0, help="MoE: at most this many sweep configs per row count")
  ap.add_argument("--no-baselines", action="store_true", help="MoE: skip the ragged_dot and XLA-reference timings")
  ap.add_argument("--budget", type=float, default=480.0, help="seconds after which remaining shapes are skipped")
  ap.add_argument("--device-span", type=int, default=0, metavar="N",
                  help="also the device time of one call (device_span.py: profiler traces of N blocking calls and "
                       "of N queued ones; "
                       "the harness's add and reduction not in it), next to the chained figure. Needs a GPU")
  a = ap.parse_args()
  enable_device_span(a.device_span, a.smoke, "--device-span")
  if a.smoke:
    QUEUED = 1
    reserve_cpu_threads_for_interpret()     # before the CPU client starts (jax.devices() below)
  log(f"jax {jax.__version__}, backend {jax.default_backend()}, devices {jax.devices()}")
  copy_bw, mm = roofline(a.smoke)
  flush()
  if a.only in ("moe_parts", "all"):
    bench_moe_parts(a.smoke)
  if a.only in ("moe", "all"):
    bench_moe(copy_bw, mm, a.smoke, a.budget if a.only == "moe" else a.budget * 0.42,
              rows=[int(v) for v in a.moe_rows.split(",") if v], kernels=[v for v in a.moe_kernels.split(",") if v],
              baselines=not a.no_baselines, max_configs=a.moe_max_configs,
              configs=json.loads(a.moe_configs) if a.moe_configs else None)
  if a.only in ("mla", "all"):
    bench_mla(copy_bw, mm, a.smoke, a.budget,
              only_shapes=[tuple(map(int, v.split(","))) for v in a.mla_shapes.split(";") if v],
              no_sweep=a.mla_no_sweep, mosaic_only=a.mla_mosaic,
              configs=json.loads(a.mla_configs) if a.mla_configs else None)
  t = table()
  with open(os.path.join(OUT, "kernels_table.md"), "w") as f:
    f.write(t + "\n")
  flush()
  print(t)
  if RESULTS["errors"]:
    print("notes:", RESULTS["errors"])


if __name__ == "__main__":
  sys.exit(main())
