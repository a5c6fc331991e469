"""ddtree-bench: records, the lossless check against AR, the plot, the shipped prompt set."""
import json
import os

import pytest

import jax.numpy as jnp
from flax import nnx

from configs.tiny import tiny, tiny_drafter
from ddtree_jax.cli import bench
from ddtree_jax.engine import Engine
from ddtree_jax.model.deepseek import DeepseekV3
from ddtree_jax.model.dflash import DFlashDrafter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.e2e
def test_run_bench_records_plot_and_table(tmp_path):
  cfg = tiny()
  dcfg = tiny_drafter(cfg)
  eng = Engine(DeepseekV3(cfg, dtype=jnp.float32, rngs=nnx.Rngs(0)), cfg,
               DFlashDrafter(dcfg, dtype=jnp.float32, rngs=nnx.Rngs(1)), dcfg)
  prompts = [[5, 6, 7, 8, 9], [10, 11, 12, 13, 14]]
  seen = []
  recs = bench.run_bench(eng, prompts, budgets=(4,), temperatures=(0.0, 1.0), max_new_tokens=6,
                         on_record=seen.append, log=lambda s: None)
  assert [(r["temperature"], r["mode"], r["budget"]) for r in recs] == [
      (0.0, "ar", None), (0.0, "dflash", None), (0.0, "ddtree", 4),
      (1.0, "ar", None), (1.0, "dflash", None), (1.0, "ddtree", 4)]
  assert seen == recs
  for r in recs:
    assert r["prompts"] == 2 and r["generated_tokens"] == 12 and r["tau"] >= 1.0 and r["tokens_per_s"] > 0
    assert sum(int(k) * v for k, v in r["accepted_histogram"].items()) + 2 == r["generated_tokens"]
    if r["temperature"] == 0.0 and r["mode"] != "ar":
      assert r["lossless_vs_ar"] == r["lossless_checked"] == 2
  assert recs[0]["tau"] == 1.0
  png = bench.plot_bench(recs, str(tmp_path / "bench.png"), "tiny")
  # Without DDTree records (e.g. --modes=ar,dflash) there is no budget axis, and the plot still draws.
  assert bench.plot_bench([r for r in recs if r["mode"] != "ddtree"], str(tmp_path / "no_tree.png"))
  assert os.path.getsize(tmp_path / "no_tree.png") > 0
  assert png and os.path.getsize(png) > 1000
  table = bench.summary_table(recs)
  assert table.count("\n") == len(recs) + 1 and "ddtree | 4" in table


def test_deadline_skips_remaining_runs():
  cfg = tiny()
  eng = Engine(DeepseekV3(cfg, dtype=jnp.float32, rngs=nnx.Rngs(0)), cfg)
  recs = bench.run_bench(eng, [[1, 2, 3]], modes=("ar",), temperatures=(0.0,), max_new_tokens=2, deadline=0.0,
                         log=lambda s: None)
  assert recs == []


def test_shipped_prompts_are_from_the_test_split():
  from ddtree_jax.train import corpus
  path = os.path.join(ROOT, "benchmarks", "prompts", "test_prompts.jsonl")
  items = [json.loads(l) for l in open(path) if l.strip()]
  assert len(items) >= 8
  for it in items:
    assert corpus.split_of(it["file"]) == "test" and it["prompt"].endswith("\n")
