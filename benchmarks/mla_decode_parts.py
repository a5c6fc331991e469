"""Where the time of a short MLA decode goes: the dispatch against its parts, on the H200.

At batch 1 and <= 32K keys a decode reads 9-38 MB (3-13 us at the copy ceiling) but takes 20-35 us
(benchmarks/RESULTS.md, issue 6 ninth round). This times, per shape, with benchmarks/kernels.py's harness
(queued samples, medians, fresh random inputs):
  harness          the harness itself around an identity call (part of every figure below);
  dispatch         custom_calls.mla_attention, impl "auto" (what the model runs: the one-launch split combine);
  dispatch_xla_combine  the Mosaic kernel with the splits combined by XLA (the dispatch before the eleventh round;
                   from 64 rows; the row's dispatch_kernel says which kernel "dispatch" ran: since issue 6 round 40
                   the Triton kernel at 64-128 rows over <= 4K keys, <= 12K at 64 rows since round 41,
                   pallas_triton.is_short_wide_decode);
  kernel           the Mosaic GPU kernel alone on prepared inputs (mosaic_gpu._kernel_inputs), only its lse
                   consumed;
  mask             mosaic_gpu._mask_words alone (the packed visibility of the tail key blocks);
  combine_xla, combine_pallas  split_combine.combine_splits / combine_splits_pallas alone on random per-split
                   outputs of the kernel's shape, the harness's add on the log-sum-exps (twelfth round on;
                   before, on the partials: an extra pass over them for the Pallas kernel only);
  combine_harness  the harness alone on those inputs (part of the combine figures);
  triton, triton_xla_combine   the Triton kernel (pallas_triton.mla_attention_pallas) with its default split,
                   its splits combined in one launch / by XLA.
benchmarks/ncu_programs.py runs the same programs under `ncu`, which times each of their kernels on its own.
The parts use the kernel module's private helpers on purpose: this is a diagnosis of that module.

Usage (GPU): PYTHONPATH=. python3 benchmarks/mla_decode_parts.py [--shapes "1,1,64,1024;1,1,64,32768"]
       (CPU): PYTHONPATH=. python3 benchmarks/mla_decode_parts.py --smoke   (interpret mode, tiny, checks it runs)
Writes $OUT/mla_decode_parts.json (or --out).
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import os
import sys
import time

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernels as kb   # noqa: E402  (the timing harness and inputs of benchmarks/kernels.py)
from custom_calls.mla_attention import (mla_attention, mosaic_gpu, pallas_triton, select_kernel,  # noqa: E402
                                         split_combine)
from ddtree_jax.train.common import write_json  # noqa: E402

DEFAULT_SHAPES = "1,1,64,1024;1,1,64,8192;1,1,64,32768;1,1,8,8192;1,1,8,32768"


def mosaic_parts(args, *, scale, interpret):
  """((kernel-only fn, its args), (mask fn, its args), the combine's args, the split count) for one shape."""
  q_lat, q_pe, ckv, kpe, cache_len, mask = args
  bsz, t, h, _ = q_lat.shape
  s_len = ckv.shape[1]
  q, qpe, cache_len, words = mosaic_gpu._kernel_inputs(q_lat, q_pe, cache_len, mask, s_len)
  m_pad = q.shape[1]
  splits = mosaic_gpu.default_num_splits(bsz, t * h, s_len)
  kern = mosaic_gpu._build_kernel(bsz=bsz, num_q=t, num_rows_pad=m_pad, num_keys=s_len, num_splits=splits,
                                  scale=scale, dtype=q_lat.dtype, interp=interpret, partial_dtype=jnp.bfloat16)
  zero = mosaic_gpu._opaque_zero()

  def kernel_only(q, qpe, ckv, kpe, cache_len, words, zero):
    return kern(cache_len, q, qpe, ckv, kpe, words, zero)[1]                     # lse [B, NS, Mpad]

  def mask_only(q_lat, cache_len, mask):
    w = mosaic_gpu._mask_words(cache_len, mask, h, m_pad, s_len)
    return w + (q_lat[0, 0, 0, 0] > 1e30).astype(w.dtype)                           # depends on the chain

  return ((kernel_only, (q, qpe, ckv, kpe, cache_len, words, zero)), (mask_only, (q_lat, cache_len, mask)),
          combine_args(s_len + h, bsz, splits, m_pad, jnp.bfloat16), splits)


def combine_args(seed, bsz, splits, rows, dtype):
  """Random per-split outputs [B, NS, M, 512] and log-sum-exps [B, NS, M] (never zero)."""
  k = jax.random.split(jax.random.PRNGKey(seed), 2)
  o_part = jax.random.normal(k[0], (bsz, splits, rows, mosaic_gpu.R), jnp.float32).astype(dtype)
  return o_part, 3.0 * jax.random.normal(k[1], (bsz, splits, rows), jnp.float32)


def programs(h_rows, *, interp):
  """(name, fn) of the whole-attention programs timed for a shape with h_rows = T x H query rows."""
  mosaic = "mosaic_interpret" if interp else "mosaic"
  out = [("dispatch", functools.partial(mla_attention, scale=kb.SCALE, impl=mosaic if interp else "auto"))]
  if h_rows >= 64 and not interp:     # (the smoke shape has one split: no combine to compare)
    out.append(("dispatch_xla_combine", functools.partial(mosaic_gpu.mla_attention_mosaic, scale=kb.SCALE,
                                                          combine="xla", interpret=interp)))
  if not interp:
    out += [("triton", functools.partial(pallas_triton.mla_attention_pallas, scale=kb.SCALE)),
            ("triton_xla_combine", functools.partial(pallas_triton.mla_attention_pallas, scale=kb.SCALE,
                                                     combine="xla"))]
  return out


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--shapes", default=DEFAULT_SHAPES, help="B,T,H,ctx;... (T x H >= 64 also times the Mosaic parts)")
  ap.add_argument("--smoke", action="store_true", help="CPU: interpret mode, one tiny K2.6-dim shape, one sample")
  ap.add_argument("--out", default=None)
  ap.add_argument("--combine_blocks", default="",
                  help="also time combine_splits_pallas with these blocks: rows,cols,splits_per_step,warps;...")
  a = ap.parse_args(argv)
  interp = a.smoke
  if a.smoke:
    mosaic_gpu.reserve_cpu_threads_for_interpret()
    kb.QUEUED = 1
  shapes = [(1, 1, 64, 256)] if a.smoke else [tuple(int(v) for v in s.split(",")) for s in a.shapes.split(";") if s]
  reps, calls = (1, 1) if a.smoke else (9, None)
  timeit = functools.partial(kb.timeit, reps=reps, calls=calls)
  out_path = a.out or os.path.join(os.environ.get("OUT") or "benchmarks/results", "mla_decode_parts.json")
  os.makedirs(os.path.dirname(out_path) or ".", exist_ok=True)
  rows = []
  for (b, t, h, s) in shapes:
    args = kb.mla_inputs(b * 1000 + t * 10 + h + s, b, t, h, s)
    sets = [args] + [kb.mla_inputs(7 + i + s, b, t, h, s) for i in range(3)]
    row = dict(B=b, T=t, H=h, ctx=s, read_bytes=b * s * 576 * 2, times_s={},
               dispatch_kernel="mosaic_interpret" if interp else select_kernel(*args, impl="auto"))
    row["times_s"]["harness"] = kb.harness_floor(sets)
    for name, fn in programs(t * h, interp=interp):
      row["times_s"][name] = timeit(fn, sets)
    if t * h >= 64:
      (kern, kargs), (mask_fn, margs), cargs, splits = mosaic_parts(args, scale=kb.SCALE, interpret=interp)
      row["mosaic_splits"] = splits
      with mosaic_gpu._abstract_gpu_context() if interp else contextlib.nullcontext():
        row["times_s"]["kernel"] = timeit(kern, [kargs])
      row["times_s"]["mask"] = timeit(mask_fn, [margs])
    else:     # the Triton kernel's f32 partials
      _, _, splits, _, _ = pallas_triton.launch_params(b, t * h, s)       # the dispatch's own choice
      cargs = combine_args(s + h, b, splits, t * h, jnp.float32)
    row["combine_splits"] = splits
    # The chain's add goes to the first argument: the log-sum-exps (a few KB), not the partials. On the partials
    # it would be an 8 MB pass of its own before the Pallas kernel, while XLA fuses it into its combine
    # (round 11's "combine alone" figures carried that pass).
    lse_first = [(cargs[1], cargs[0])]
    row["times_s"]["combine_harness"] = kb.harness_floor(lse_first)
    row["times_s"]["combine_xla"] = timeit(lambda l, o: split_combine.combine_splits(o, l).astype(jnp.bfloat16),
                                           lse_first)
    row["times_s"]["combine_pallas"] = timeit(
        lambda l, o: split_combine.combine_splits_pallas(o, l, out_dtype=jnp.bfloat16, interpret=interp), lse_first)
    row["combine_default_blocks"] = list(split_combine.default_blocks(b, cargs[0].shape[2], 512, splits))
    for blocks in [tuple(int(v) for v in c.split(",")) for c in a.combine_blocks.split(";") if c]:
      rows_, cols, per_step, warps = blocks
      fn = functools.partial(split_combine.combine_splits_pallas, out_dtype=jnp.bfloat16, interpret=interp,
                             block_rows=rows_, block_cols=cols, splits_per_step=per_step, num_warps=warps)
      row["times_s"]["combine_pallas_" + "_".join(map(str, blocks))] = timeit(lambda l, o, fn=fn: fn(o, l),
                                                                              lse_first)
    rows.append(row)
    kb.log(f"mla B={b} T={t} H={h} ctx={s}: " + ", ".join(f"{k} {v * 1e6:.1f} us" for k, v in row["times_s"].items()))
  doc = dict(date=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), device=jax.devices()[0].device_kind,
             jax=jax.__version__, smoke=a.smoke, rows=rows, argv=sys.argv[1:])
  write_json(out_path, doc)
  print(f"wrote {out_path}")
  return rows


if __name__ == "__main__":
  main()
