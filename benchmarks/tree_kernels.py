"""Tree build + tree walk: the XLA reference loops vs the Pallas kernels, on the GPU (one call).

  PYTHONPATH=. python3 benchmarks/tree_kernels.py [--out $OUT/tree_kernels.json]

Checks the kernels against the references on fresh random inputs (ties included), then times both
(warm-up, median of 50) for budgets 8..256 at batch 1 and 8, L = 15 (block 16), K = min(N, 64 top-k).
Roofline: both are latency-bound (a few KB of data, O(N^2) scalar work); the floor is one kernel
launch (~5 us), so the figure of merit is time per round against the round's other costs.
"""
import argparse
import json
import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from custom_calls.tree_build import tree_build
from custom_calls.tree_verify import tree_walk


def timed(f, *args, reps=50):
  jax.block_until_ready(f(*args))
  ts = []
  for _ in range(reps):
    t = time.perf_counter()
    jax.block_until_ready(f(*args))
    ts.append(time.perf_counter() - t)
  return statistics.median(ts) * 1e3


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "tree_kernels.json"))
  ap.add_argument("--smoke", action="store_true", help="tiny sizes, interpret mode (CPU)")
  a = ap.parse_args()
  impl = "pallas_interpret" if a.smoke else "pallas"
  rng = np.random.default_rng(0)
  rows = []
  budgets = (8, 32) if a.smoke else (8, 32, 64, 128, 256)
  for b in (1, 8):
    for n in budgets:
      L, K = 15, min(n, 64)
      lp = -np.sort(-np.log(rng.dirichlet(np.ones(512) * 0.2, size=(b, L)))[..., :K], axis=-1)
      lp = np.round(lp, 1)   # ties
      tok = rng.integers(0, 160000, size=(b, L, K)).astype(np.int32)
      lp, tok = jnp.asarray(lp, jnp.float32), jnp.asarray(tok)
      ref = jax.jit(lambda x, y: tree_build(x, y, n, impl="xla"))
      ker = jax.jit(lambda x, y: tree_build(x, y, n, impl=impl))
      r, k = ref(lp, tok), ker(lp, tok)
      ok_build = all(bool(jnp.array_equal(u, v)) for u, v in zip(r, k))
      tokens, parents, _, _, _, valid = r
      target = jnp.asarray(rng.integers(0, 160000, size=tokens.shape).astype(np.int32))
      target = target.at[:, 0].set(tokens[:, 1])        # accept at least one node
      wref = jax.jit(lambda *x: tree_walk(*x, L, impl="xla"))
      wker = jax.jit(lambda *x: tree_walk(*x, L, impl=impl))
      ok_walk = all(bool(jnp.array_equal(u, v)) for u, v in zip(wref(tokens, parents, valid, target),
                                                               wker(tokens, parents, valid, target)))
      row = {"batch": b, "budget": n, "topk": K, "build_ok": ok_build, "walk_ok": ok_walk,
             "build_xla_ms": timed(ref, lp, tok), "build_pallas_ms": timed(ker, lp, tok),
             "walk_xla_ms": timed(wref, tokens, parents, valid, target),
             "walk_pallas_ms": timed(wker, tokens, parents, valid, target)}
      rows.append(row)
      print(row, flush=True)
  with open(a.out, "w") as f:
    json.dump({"device": str(jax.devices()[0]), "rows": rows}, f, indent=1)
  print(f"{'B':>3} {'N':>4} | {'build xla':>10} {'build pallas':>12} | {'walk xla':>9} {'walk pallas':>11} | ok")
  for r in rows:
    print(f"{r['batch']:>3} {r['budget']:>4} | {r['build_xla_ms']:>8.3f}ms {r['build_pallas_ms']:>10.3f}ms | "
          f"{r['walk_xla_ms']:>7.3f}ms {r['walk_pallas_ms']:>9.3f}ms | {r['build_ok'] and r['walk_ok']}")


if __name__ == "__main__":
  main()
