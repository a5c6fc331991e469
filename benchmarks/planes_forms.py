"""How XLA should build the MoE's activation planes (nibbles.activation_planes): the GPU time of each form.

In round 32's traces (H100) the few-token dispatch spends 0.9 + 1.3 us in two XLA kernels before its MoE kernels,
read then as the planes (x [N, D] -> f32 [N, 8, D/8] planes, each pre-scaled by 2**-e_j) made into two fusions.
At 1 token the whole call is 18.4 us, so each is ~5% of it. The forms timed here give the same float32 numbers
(checked bit for bit):
  transpose           nibbles.activation_planes as of round 32: convert, multiply by the plane scales, swap axes;
  transpose_first     swap axes first, then the multiply;
  gather              x[:, PERM] * SCALE: a gather with a constant permutation (a loop fusion, no transpose);
  current             whatever nibbles.activation_planes is now (the form the dispatch runs).
For each form and token count: the GPU time of one call alone (device_span.py: busy time and each kernel), and
the dispatch (custom_calls.moe_int4, impl "pallas") at 1 and 4 tokens with each form patched in.
Round 33 (H100, benchmarks/RESULTS.md): alone every form is one fusion, the transpose the fastest (1.06 us at 1
token); in the dispatch the other 0.9-us kernel stays whatever the form, so it is not the planes.

Usage (GPU): PYTHONPATH=. python3 benchmarks/planes_forms.py [--tokens 1,2,4,8,64] [--out F]
       (CPU): PYTHONPATH=. python3 benchmarks/planes_forms.py --check   (the bit-for-bit check only)
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from custom_calls.moe_int4 import nibbles  # noqa: E402

D = 7168


def planes_transpose(x, nibble4_in_place=True):
  n, d = x.shape
  scale = nibbles.plane_scale(jnp.arange(8, dtype=jnp.int32), nibble4_in_place)               # [8]
  return jnp.swapaxes(x.astype(jnp.float32).reshape(n, d // 8, 8) * scale, 1, 2)


def planes_transpose_first(x, nibble4_in_place=True):
  n, d = x.shape
  scale = nibbles.plane_scale(jnp.arange(8, dtype=jnp.int32), nibble4_in_place)               # [8]
  return jnp.swapaxes(x.astype(jnp.float32).reshape(n, d // 8, 8), 1, 2) * scale[:, None]


def planes_gather(x, nibble4_in_place=True):
  n, d = x.shape
  j = np.repeat(np.arange(8), d // 8)                             # [D]: plane of each planes-layout column
  perm = 8 * np.tile(np.arange(d // 8), 8) + j                    # column of x at each planes-layout column
  scale = 2.0 ** -np.asarray(nibbles.plane_exponents(nibble4_in_place), np.float32)[j]
  return (x.astype(jnp.float32)[:, perm] * scale.astype(np.float32)).reshape(n, 8, d // 8)


FORMS = {"transpose": planes_transpose, "transpose_first": planes_transpose_first, "gather": planes_gather,
         "current": lambda x, nibble4_in_place=True: nibbles.activation_planes(x, nibble4_in_place=nibble4_in_place)}


def check(tokens):
  """Every form gives the transpose form's bits, for both nibble-4 layouts."""
  for n in tokens:
    x = jax.random.normal(jax.random.PRNGKey(n), (n, D), jnp.bfloat16) * 37.0
    for in_place in (True, False):
      ref = np.asarray(jax.jit(planes_transpose, static_argnums=1)(x, in_place))
      for name, form in FORMS.items():
        got = np.asarray(jax.jit(form, static_argnums=1)(x, in_place))
        if got.shape != ref.shape or not np.array_equal(got.view(np.int32), ref.view(np.int32)):
          raise SystemExit(f"planes form {name!r} differs from 'transpose' at {n} tokens "
                           f"(nibble4_in_place={in_place}): shape {got.shape} vs {ref.shape}")
  print(f"check: every form gives the same bits at tokens {tokens}", flush=True)


def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--tokens", default="1,2,4,8,64")
  ap.add_argument("--dispatch_tokens", default="1,4")
  ap.add_argument("--calls", type=int, default=12, help="traced calls per figure (device_span.py)")
  ap.add_argument("--check", action="store_true", help="only the bit-for-bit check (any backend)")
  ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "planes_forms.json"))
  args = ap.parse_args()
  tokens = [int(t) for t in args.tokens.split(",") if t]
  check(tokens)
  if args.check:
    return
  if jax.default_backend() != "gpu":
    raise SystemExit("planes_forms.py: the timings read the trace's GPU plane; on this backend use --check")
  import device_span
  import kernels as kb
  from custom_calls import moe_int4
  from custom_calls.moe_int4 import planes_consts
  print(jax.devices()[0].device_kind, flush=True)
  results = {"device": jax.devices()[0].device_kind, "planes": [], "dispatch": []}
  for n in tokens:
    xs = [(jax.random.normal(jax.random.PRNGKey(100 + i), (n, D), jnp.bfloat16),) for i in range(4)]
    for name, form in FORMS.items():
      d = device_span.device_span(form, xs, args.calls)
      results["planes"].append({"tokens": n, "form": name, "busy_us": d["busy_s"] * 1e6,
                                "kernels": d.get("kernels")})
      print(f"planes N={n} {name:16s} busy {d['busy_s'] * 1e6:6.2f} us kernels {d.get('kernels')}", flush=True)
  original = planes_consts.activation_planes
  for n in [int(t) for t in args.dispatch_tokens.split(",") if t]:
    sets = [kb.moe_inputs(200 + i, n, 48, D, 2048) for i in range(4)]

    def dispatch(x, ids, w, *experts):
      return moe_int4.routed_experts_int4(x, ids, w, *experts, impl="pallas")
    ref = None
    for name, form in FORMS.items():
      planes_consts.activation_planes = form
      jax.clear_caches()              # the kernels' jitted wrappers traced the previous form
      try:
        out = np.asarray(jax.jit(dispatch)(*sets[0]), np.float32)
        ref = out if ref is None else ref
        same = bool(np.array_equal(out, ref))
        d = device_span.device_span(dispatch, sets, args.calls)
      finally:
        planes_consts.activation_planes = original
      results["dispatch"].append({"tokens": n, "form": name, "busy_us": d["busy_s"] * 1e6, "same_output": same,
                                  "kernels": d.get("kernels")})
      print(f"dispatch N={n} {name:16s} busy {d['busy_s'] * 1e6:6.2f} us same {same} kernels {d.get('kernels')}",
            flush=True)
  with open(args.out, "w") as f:
    json.dump(results, f, indent=1)


if __name__ == "__main__":
  main()
