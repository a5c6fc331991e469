"""The bf16 matrix-vector products of a K2.6 AR step (one token, one GPU's shard), in the forms XLA can be given.

Issue 6's thirteenth round found, in the slice's optimized HLO (benchmarks/results/issue6_r13/call1/hlo_*), that XLA
turns some one-row products into an elementwise product of the whole weight with the broadcast vector, written to
memory, then a reduction (q_b: a [1536, 1536] `loop_multiply_fusion` then an `input_reduce_fusion`, 12.4 us for
4.7 MB), and others into two-stage reductions at 1.1-1.9 TB/s (kv_a, o_proj, router, shared expert), while the
larger ones (q_a, dense MLP, lm_head) became GEMM fusions at 2.6-4.5 TB/s. This script times each product of the
step in three forms, with the weights' bytes over the copy bandwidth as the roofline:

  plain   x [1, D] @ W                           what the model writes today
  rows2   (concatenate([x, x]) @ W)[:1]         two rows: not a vector, so not rewritten into a reduction
  f32acc  dot(x, W, preferred_element_type=f32)  the same product with an fp32 result type
  nk      x [1, D] against W stored transposed, [N, D] (inputs contiguous per output; a load-time relayout)
  nk_rows2  the same with two rows

and checks every form against an fp32 reference on fresh random (never zero) inputs. For each form it also
records what XLA compiled (the kinds of fusions and custom calls in the optimized HLO of the product alone).
Timing: kernels.py's chained harness (queued samples, medians; its own floor reported), rotating through enough
weight copies (ROTATION_BYTES) that the weights come from HBM, as each layer's do in a step.

  PYTHONPATH=. python3 benchmarks/matvec_forms.py --out $OUT/matvec_forms.json      (GPU)
  PYTHONPATH=. python3 benchmarks/matvec_forms.py --smoke                            (CPU, tiny shapes)
Not yet run on the GPU (written after session 15's device time ran out).
"""
from __future__ import annotations

import argparse
import collections
import math
import os
import re
import sys
import time

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import kernels as kb  # noqa: E402
from ddtree_jax.train.common import write_json  # noqa: E402

# (name, inputs, outputs) per GPU of an 8-way K2.6 mesh (benchmarks/k26_slice.py SliceDims)
K26_PRODUCTS = (("q_a", 7168, 1536), ("kv_a", 7168, 576), ("q_b", 1536, 1536), ("o_proj", 1024, 7168),
                ("router", 7168, 384), ("shared_gate", 7168, 256), ("shared_down", 256, 7168),
                ("dense_gate", 7168, 2304), ("dense_down", 2304, 7168), ("lm_head", 7168, 20480))
SMOKE_PRODUCTS = (("small", 256, 64), ("wide", 64, 512))

def _nk_dot(x, w_nk):
  """x [R, K] against a weight stored [N, K] (inputs contiguous per output)."""
  return jax.lax.dot_general(x, w_nk, (((1,), (1,)), ((), ())))


FORMS = {
    "plain": lambda x, w: x @ w,
    "rows2": lambda x, w: (jnp.concatenate([x, x], axis=0) @ w)[:1],
    "f32acc": lambda x, w: jnp.dot(x, w, preferred_element_type=jnp.float32).astype(x.dtype),
    "nk": _nk_dot,
    "nk_rows2": lambda x, w: _nk_dot(jnp.concatenate([x, x], axis=0), w)[:1],
}
# forms that take the weight transposed, [N, K] (a load-time relayout the model could do once)
NK_FORMS = ("nk", "nk_rows2")
# weight sets rotated per product so that the chained calls do not find the weights in the 60 MB L2 (in a
# step every layer reads its own weights once): at least this many bytes of weights in the rotation
ROTATION_BYTES = 160e6


def compiled_kinds(fn, x, w):
  """{kind: count} of the fusions and custom calls in the optimized HLO of fn(x, w) (e.g. gemm_fusion,
  input_reduce_fusion, loop_multiply_fusion, cublas)."""
  text = jax.jit(fn).lower(x, w).compile().as_text()
  kinds = collections.Counter()
  for name in re.findall(r"^\s*%?([A-Za-z_]+?)(?:[._]\d+)* = \S+ (?:fusion|custom-call)\(", text, re.M):
    kinds[name] += 1
  for target in re.findall(r'custom_call_target="([^"]+)"', text):
    kinds[f"custom_call:{target}"] += 1
  return dict(kinds)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--smoke", action="store_true")
  ap.add_argument("--forms", default=",".join(FORMS))
  ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "matvec_forms.json"))
  a = ap.parse_args(argv)
  forms = [f for f in a.forms.split(",") if f]
  unknown = [f for f in forms if f not in FORMS]
  if unknown:
    raise SystemExit(f"matvec_forms: unknown --forms {unknown}; expected some of {list(FORMS)}")
  copy_bw, _ = kb.roofline(a.smoke)
  rows = []
  for name, d_in, d_out in (SMOKE_PRODUCTS if a.smoke else K26_PRODUCTS):
    kx, kw = jax.random.split(jax.random.key(d_in * 7 + d_out))
    x = jax.random.normal(kx, (1, d_in), jnp.float32).astype(jnp.bfloat16)
    n_sets = 1 if a.smoke else max(1, min(32, math.ceil(ROTATION_BYTES / (2 * d_in * d_out))))
    ws = [(jax.random.normal(k, (d_in, d_out), jnp.float32) * d_in ** -0.5).astype(jnp.bfloat16)
          for k in jax.random.split(kw, n_sets)]
    ref = x.astype(jnp.float32) @ ws[0].astype(jnp.float32)
    floor = kb.harness_floor([(x, w) for w in ws])
    roof = 2 * d_in * d_out / copy_bw
    for form in forms:
      fn = FORMS[form]
      arg_sets = [(x, jnp.asarray(w.T) if form in NK_FORMS else w) for w in ws]
      err = kb.rel_err(jax.jit(fn)(*arg_sets[0]), ref)
      if not err < 2e-2:
        raise AssertionError(f"matvec_forms: {name} {form}: relative error {err:.2e} against the fp32 reference")
      t = kb.timeit(fn, arg_sets)
      row = dict(product=name, d_in=d_in, d_out=d_out, form=form, seconds=t, harness_s=floor, rel_err=err,
                 weight_bytes=2 * d_in * d_out, bytes_per_s=2 * d_in * d_out / t, roofline_s=roof,
                 frac_roofline=roof / t, weight_sets=n_sets, compiled=compiled_kinds(fn, *arg_sets[0]))
      rows.append(row)
      kb.log(f"{name:12s} {d_in:5d} x {d_out:5d} {form:6s}: {t * 1e6:7.1f} us (harness {floor * 1e6:.1f}), "
             f"{row['bytes_per_s'] / 1e12:.2f} TB/s = {row['frac_roofline']:.2f} of the roofline, err {err:.1e}, "
             f"{row['compiled']}")
  write_json(a.out, dict(date=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), device=jax.devices()[0].device_kind,
                         backend=jax.default_backend(), copy_bytes_per_s=copy_bw, rows=rows))
  return rows


if __name__ == "__main__":
  main()
