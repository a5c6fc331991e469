"""ddtree_jax.topk.top_k equals jax.lax.top_k, values and indices, ties included."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ddtree_jax.topk import default_chunk, top_k


@pytest.mark.parametrize("shape,k,chunk", [((2, 3, 4096), 32, 256), ((15, 2048), 8, 128), ((1, 15, 4096), 256, 512),
                                           ((4, 1024), 64, 64), ((3, 4096), 5, None), ((7, 96), 4, 32)])
def test_equals_lax_top_k_with_ties(shape, k, chunk):
  key = jax.random.key(sum(shape) + k)
  x = jax.random.normal(key, shape, jnp.float32)
  x = jnp.round(x * 4) / 4            # many ties: the indices must follow lax.top_k's order among equal values
  want_v, want_i = jax.lax.top_k(x, k)
  got_v, got_i = jax.jit(lambda a: top_k(a, k, chunk=chunk))(x)
  np.testing.assert_array_equal(np.asarray(got_v), np.asarray(want_v))
  np.testing.assert_array_equal(np.asarray(got_i), np.asarray(want_i))
  assert got_i.dtype == want_i.dtype


def test_fallbacks_and_bad_k():
  x = jnp.arange(12.0).reshape(2, 6)
  for chunk in (None, 6, 5, 2):        # >= the axis, not dividing it, smaller than k: one stage
    v, i = top_k(x, 3, chunk=chunk)
    np.testing.assert_array_equal(np.asarray(i), [[5, 4, 3], [5, 4, 3]])
  gpu = lambda v, k, rows=15: default_chunk(v, k, rows, backend="gpu")
  assert gpu(4096, 32) == 512 and gpu(20480, 64) == 512 and gpu(163840, 8) == 512
  assert gpu(4096, 256) is None and gpu(1024, 8) is None and gpu(4096, 32, rows=120) is None
  assert gpu(4100, 8) is None and default_chunk(4096, 32, 15, backend="cpu") is None
  with pytest.raises(ValueError, match=r"k = 7 must be in \[1, 6\]"):
    top_k(x, 7)


def test_benchmark_smoke(tmp_path):
  import os
  import sys
  sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
  import topk_forms
  rows = topk_forms.main(["--smoke", "--out", str(tmp_path / "t.json")])
  assert {r["form"] for r in rows} >= {"lax.top_k", "chunk 256"} and all(r["seconds"] > 0 for r in rows)


@pytest.mark.e2e
def test_engine_tokens_are_the_same_with_two_stages(monkeypatch):
  """The drafter's top-K and the sampling filter's top-k through two stages (forced here on the CPU, where
  default_chunk keeps one) give the engine the same drafts and samples: the same tokens, the same accepted
  lengths per round."""
  from flax import nnx

  import ddtree_jax.engine as engine_module
  import ddtree_jax.topk as topk_module
  from configs.tiny import tiny, tiny_drafter
  from ddtree_jax.model.deepseek import DeepseekV3
  from ddtree_jax.model.dflash import DFlashDrafter
  cfg = tiny(stop_token_ids=())
  dcfg = tiny_drafter(cfg, block_size=8)
  make = lambda: engine_module.Engine(DeepseekV3(cfg, dtype=jnp.float32, rngs=nnx.Rngs(0)), cfg,
                                      DFlashDrafter(dcfg, dtype=jnp.float32, rngs=nnx.Rngs(1)), dcfg)
  from ddtree_jax.sampling import SamplingParams
  prompts = [[1, 2, 3, 4], [5, 6]]
  sampled = dict(mode="ddtree", budget=9, max_new_tokens=12, sampling=SamplingParams(1.0, 1.0, 5), seed=3)
  ref = make().generate(prompts, mode="ddtree", budget=9, max_new_tokens=12)
  ref_sampled = make().generate(prompts, **sampled)     # the top-5 filter of sampling.filtered_logits too
  chunk = cfg.vocab_size // 4
  calls = []
  monkeypatch.setattr(topk_module, "default_chunk",
                      lambda v, k, rows=1, backend=None: calls.append((v, k)) or (chunk if k <= chunk < v else None))
  monkeypatch.setattr(engine_module, "_COMPILED", {})     # compile the round again, with the two stages
  two = make().generate(prompts, mode="ddtree", budget=9, max_new_tokens=12)
  two_sampled = make().generate(prompts, **sampled)
  assert (cfg.vocab_size, 9) in calls and (cfg.vocab_size, 5) in calls
  assert [(r.token_ids, r.accepted_per_round) for r in two] == [(r.token_ids, r.accepted_per_round) for r in ref]
  assert [r.token_ids for r in two_sampled] == [r.token_ids for r in ref_sampled]
