"""The drafter's top-K over the vocabulary: jax.lax.top_k against ddtree_jax.topk.top_k's two stages, per chunk.

Shapes are the round's: [B, block - 1, V] log-probs, K = min(N, V) for a DDTree budget N (spec/step.py
draft_distributions); V = 4096 (the embedded model), 20480 (a K2.6 vocabulary shard, vocab_parallel) and 163840
(K2.6 on one device). Every form is checked equal to lax.top_k (values and indices) on fresh random inputs with
ties; times are kernels.py's chained harness (queued samples, medians; its floor in the JSON).

  PYTHONPATH=. python3 benchmarks/topk_forms.py --out $OUT/topk_forms.json      (GPU)
  PYTHONPATH=. python3 benchmarks/topk_forms.py --smoke                          (CPU)
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import kernels as kb  # noqa: E402
from ddtree_jax.topk import default_chunk, top_k  # noqa: E402
from ddtree_jax.train.common import write_json  # noqa: E402

SHAPES = ((1, 15, 4096), (8, 15, 4096), (1, 15, 20480), (1, 15, 163840))
KS = (8, 32, 64, 256)
CHUNKS = (128, 256, 512, 1024, 2048)
SMOKE_SHAPES, SMOKE_KS, SMOKE_CHUNKS = ((1, 15, 2048),), (8, 32), (256, 512)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--smoke", action="store_true")
  ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "topk_forms.json"))
  a = ap.parse_args(argv)
  shapes, ks, chunks = (SMOKE_SHAPES, SMOKE_KS, SMOKE_CHUNKS) if a.smoke else (SHAPES, KS, CHUNKS)
  rows = []
  for shape in shapes:
    sets = []
    for i in range(4):
      x = jax.random.normal(jax.random.key(i + shape[-1]), shape, jnp.float32)
      sets.append((jax.nn.log_softmax(jnp.round(x * 64) / 16, axis=-1),))     # log-probs with ties
    floor = kb.harness_floor(sets)
    for k in ks:
      want_v, want_i = jax.lax.top_k(sets[0][0], k)
      forms = [("lax.top_k", None)] + [(f"chunk {c}", c) for c in chunks if k <= c < shape[-1]]
      line = []
      for name, c in forms:
        fn = (lambda x, k=k: jax.lax.top_k(x, k)[0]) if c is None else (lambda x, k=k, c=c: top_k(x, k, chunk=c)[0])
        if c is not None:
          got_v, got_i = jax.jit(lambda x, k=k, c=c: top_k(x, k, chunk=c))(sets[0][0])
          if not (np.array_equal(np.asarray(got_v), np.asarray(want_v))
                  and np.array_equal(np.asarray(got_i), np.asarray(want_i))):
            raise AssertionError(f"topk_forms: {shape} k {k} chunk {c}: differs from lax.top_k")
        t = kb.timeit(fn, sets)
        rows.append(dict(shape=list(shape), k=k, form=name, chunk=c, seconds=t, harness_s=floor,
                         default=c == default_chunk(shape[-1], k)))
        line.append(f"{name} {t * 1e6:.1f}")
      kb.log(f"{shape} k {k} (harness {floor * 1e6:.1f} us, default chunk {default_chunk(shape[-1], k)}): "
             + ", ".join(line))
  write_json(a.out, dict(date=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                         device=jax.devices()[0].device_kind, rows=rows))
  return rows


if __name__ == "__main__":
  main()
