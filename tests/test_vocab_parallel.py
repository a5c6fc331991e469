"""Vocabulary-parallel decisions (argmax, sampling with temperature / top-k / top-p, top-K log-probs,
logsumexp) on 8 virtual CPU devices (subprocess) against the single-device functions."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def results():
  env = dict(os.environ, JAX_PLATFORMS="cpu",
             XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip(),
             PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  r = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
  line = [l for l in r.stdout.splitlines() if l.startswith("RESULT ")][-1]
  return json.loads(line[len("RESULT "):])


def test_argmax_identical_with_ties(results):
  assert results["argmax"] == "ok", results["argmax"]


def test_topk_logprobs(results):
  assert results["topk"] == "ok", results["topk"]


def test_logsumexp(results):
  assert results["lse"] < 1e-5


def test_filtered_logits_same_support(results):
  assert results["filter"] == "ok", results["filter"]


def test_samples_identical(results):
  """With the same key, the vocab-parallel sample is the single-device sample (same Gumbel noise)."""
  assert results["samples"] == "ok", results["samples"]


def _main():
  import jax
  import jax.numpy as jnp
  import numpy as np
  from jax.sharding import NamedSharding, PartitionSpec as P

  from ddtree_jax import sharding, vocab_parallel as vp
  from ddtree_jax.sampling import SamplingParams, choose_tokens, filtered_logits

  assert jax.device_count() == 8
  out = {}
  rng = np.random.default_rng(0)
  b, t, v = 2, 5, 256
  x = rng.normal(size=(b, t, v)).astype(np.float32) * 3
  # Ties across shard boundaries and inside shards: the lowest index must win, as jnp.argmax.
  x[0, 0, [7, 40, 200]] = 50.0
  x[0, 1, [100, 101]] = 50.0
  x[1, 2, :] = 1.0                          # all equal
  x[1, 3, :] = -jnp.inf
  x[1, 3, 255] = 0.0                        # the only finite value in the last shard
  checks = []
  for m in ("1x8", "2x4"):
    mesh = sharding.make_mesh(m)
    spec = P(sharding.batch_axis(mesh, b), None, "model")
    xs = jax.device_put(x, NamedSharding(mesh, spec))

    got = np.asarray(jax.jit(lambda a: vp.argmax(a, mesh))(xs))
    want = np.asarray(jnp.argmax(x, axis=-1))
    checks.append(("argmax " + m, np.array_equal(got, want), got.tolist(), want.tolist()))

    finite = np.where(np.isfinite(x), x, -1e30).astype(np.float32)
    fs = jax.device_put(finite, NamedSharding(mesh, spec))
    for k in (1, 40):
      lp, tok = jax.jit(lambda a: vp.top_k_logprobs(a, k, mesh))(fs)
      rlp, rtok = jax.lax.top_k(jax.nn.log_softmax(finite, axis=-1), k)
      ok = np.array_equal(np.asarray(tok), np.asarray(rtok)) and np.allclose(lp, rlp, atol=1e-5)
      checks.append((f"topk{k} {m}", ok, None, None))
    lse = jax.jit(lambda a: vp.logsumexp(a, mesh))(fs)
    out["lse"] = max(out.get("lse", 0.0), float(np.max(np.abs(lse - jax.nn.logsumexp(finite, axis=-1)))))

    if m != "1x8":
      continue
    smooth = jax.device_put(rng.normal(size=(b, t, v)).astype(np.float32) * 2, NamedSharding(mesh, spec))
    for params in (SamplingParams(0.7, top_k=20), SamplingParams(1.3, top_p=0.8),
                   SamplingParams(0.9, top_p=0.5, top_k=50)):
      fp = np.asarray(jax.jit(lambda a: vp.filtered_logits(a, params, mesh))(smooth))
      fr = np.asarray(filtered_logits(np.asarray(smooth), params))
      same = np.array_equal(np.isfinite(fp), np.isfinite(fr)) and np.allclose(
          np.where(np.isfinite(fr), fp, 0), np.where(np.isfinite(fr), fr, 0), atol=1e-6)
      checks.append((f"filter {params} {m}", same, None, None))
      for seed in range(2):
        key = jax.random.key(seed)
        sp = np.asarray(jax.jit(lambda a, k: choose_tokens(a, k, params, mesh))(smooth, key))
        sr = np.asarray(choose_tokens(np.asarray(smooth), key, params))
        checks.append((f"sample {params} seed {seed} {m}", np.array_equal(sp, sr), sp.tolist(), sr.tolist()))

  def verdict(prefix):
    bad = [c for c in checks if c[0].startswith(prefix) and not c[1]]
    return "ok" if not bad else str(bad[:3])
  out.update(argmax=verdict("argmax"), topk=verdict("topk"), filter=verdict("filter"), samples=verdict("sample"))
  print("RESULT " + json.dumps(out))


if __name__ == "__main__":
  _main()
