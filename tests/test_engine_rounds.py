"""benchmarks/engine_rounds.py on the CPU: the embedded model, tokens checked equal across settings, and the
top-K A/B switch (--topk_stages) that drops the engine's compiled programs when it changes."""
import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))


@pytest.mark.e2e
def test_topk_switch_and_a_small_run(tmp_path):
  import engine_rounds as er
  import ddtree_jax.engine as engine_module
  import ddtree_jax.topk as topk_module
  try:
    engine_module._COMPILED["marker"] = None
    er.use_topk_stages("one")
    assert topk_module.default_chunk(4096, 32, 15, backend="gpu") is None and "marker" not in engine_module._COMPILED
    engine_module._COMPILED["marker"] = None
    er.use_topk_stages("one")                                   # unchanged setting: the programs stay
    assert "marker" in engine_module._COMPILED
    er.use_topk_stages("auto")
    assert topk_module.default_chunk(4096, 32, 15, backend="gpu") == 512 and "marker" not in engine_module._COMPILED
    out = tmp_path / "er.json"
    rows = er.main(["--num_prompts", "1", "--max_new_tokens", "4", "--reps", "1", "--runs", "ddtree:8",
                    "--rounds_per_call", "8", "--topk_stages", "auto,one", "--dtype", "float32", "--out", str(out)])
    assert [r["topk_stages"] for r in rows] == ["auto", "one"]
    assert all(r["generated"] == 4 and r["engine_seconds"] > 0 for r in rows)
    assert json.load(open(out))["rows"][1]["topk_stages"] == "one"
  finally:
    er.use_topk_stages("auto")          # as the other tests expect it
