"""--budget=auto (spec/auto_budget.py): lossless at T=0, expected-acceptance bookkeeping, the choice rule."""
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from configs.tiny import tiny, tiny_drafter
from ddtree_jax.engine import Engine
from ddtree_jax.model.deepseek import DeepseekV3
from ddtree_jax.model.dflash import DFlashDrafter
from ddtree_jax.spec.auto_budget import AutoBudget, tree_expected, update_expected
from ddtree_jax.spec.tree import build_tree

CANDS = (2, 4)


@pytest.fixture(scope="module")
def setup():
  cfg = tiny(stop_token_ids=())
  dcfg = tiny_drafter(cfg, block_size=8)
  target = DeepseekV3(cfg, dtype=jnp.float32, rngs=nnx.Rngs(0))
  return cfg, dcfg, target


def test_auto_equals_ar_greedy(setup):
  """Random DFlash weights (short acceptances); the budget switches between rounds."""
  cfg, dcfg, target = setup
  eng = Engine(target, cfg, DFlashDrafter(dcfg, dtype=jnp.float32, rngs=nnx.Rngs(7)), dcfg)
  eng.auto_options = dict(candidates=CANDS, calib_rounds=1, redecide_every=1, explore_every=3)
  rng = np.random.default_rng(3)
  prompts = [rng.integers(2, cfg.vocab_size - 1, size=int(rng.integers(2, 12))).tolist() for _ in range(2)]
  ar = [r.token_ids for r in eng.generate(prompts, mode="ar", max_new_tokens=20)]
  for run in range(2):      # the second run reuses the measured costs (no calibration rounds)
    res = eng.generate(prompts, mode="ddtree", budget="auto", max_new_tokens=20)
    assert [r.token_ids for r in res] == ar
    used = eng.last_auto["rounds_per_budget"]
    assert set(used) <= set(CANDS) and sum(used.values()) == max(r.rounds for r in res)
    if run == 0:
      assert set(used) == set(CANDS)      # calibration ran every candidate


def test_expected_matches_tree_scores():
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(2, 5, 50)) * 3
  lp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  order = np.argsort(-lp, axis=-1)[..., :8]
  top_lp = jnp.asarray(np.take_along_axis(lp, order, -1), jnp.float32)
  tree = build_tree(top_lp, jnp.asarray(order, jnp.int32), 8, root_tokens=jnp.zeros((2,), jnp.int32))
  vals, known = tree_expected(tree.scores, tree.valid, (2, 8, 16))
  want8 = 1 + np.exp(np.asarray(tree.scores)[:, 1:]).sum(-1)
  np.testing.assert_allclose(np.asarray(vals)[:, 1], want8, rtol=1e-5)
  assert list(np.asarray(known)) == [True, True, False]
  # E(2) of the top-8 tree = E of the optimal 2-node tree (the first two pops)
  t2 = build_tree(top_lp, jnp.asarray(order, jnp.int32), 2, root_tokens=jnp.zeros((2,), jnp.int32))
  np.testing.assert_allclose(np.asarray(vals)[:, 0], 1 + np.exp(np.asarray(t2.scores)[:, 1:]).sum(-1), rtol=1e-5)
  # running estimate: first value taken as is, unknown candidates and finished requests kept
  prev = jnp.asarray([[0.0, 0.0, 5.0], [2.0, 2.0, 2.0]])
  new = np.asarray(update_expected(prev, tree.scores, tree.valid, jnp.asarray([True, False]), (2, 8, 16)))
  np.testing.assert_allclose(new[0, :2], np.asarray(vals)[0, :2], rtol=1e-6)
  assert new[0, 2] == 5.0 and (new[1] == 2.0).all()


def test_choice_rule():
  costs = {8: 1.0, 16: 1.5, 32: 3.0}
  auto = AutoBudget((8, 16, 32), cost_fn=costs.__getitem__)
  e = np.asarray([[2.0, 4.0, 5.0]])             # tokens/s: 2, 2.67, 1.67
  assert auto.choose(e, np.asarray([True])) == 16
  assert auto.choose(np.asarray([[3.0, 3.5, 6.5]]), np.asarray([True])) == 8
  with pytest.raises(ValueError):
    AutoBudget((0, 4))


def test_cli_budget_flag():
  from ddtree_jax.cli.common import UsageError, parse_budget
  assert parse_budget("auto") == "auto" and parse_budget("16") == 16
  with pytest.raises(UsageError, match="--budget=0: must be >= 1"):
    parse_budget("0")
  with pytest.raises(UsageError, match="integer >= 1 or 'auto'"):
    parse_budget("many")
