"""viz: the tree picture (PNG, colouring of the accepted path), round traces, ddtree-generate --trace_dir."""
import json
import os

import numpy as np
import pytest

from ddtree_jax.viz import RoundTrace, node_roles, plot_tree, token_label, tracing
from tests.generate_cli import run_generate as run_cli


def hand_tree():
  """root(10) -> a(11) -> c(13) -> e(15); root -> b(12); a -> d(14); slot 6 padding. Accepted: root, a, c."""
  parents = np.array([-1, 0, 0, 1, 1, 3, -1], np.int32)
  tokens = np.array([10, 11, 12, 13, 14, 15, 0], np.int32)
  depths = np.array([0, 1, 1, 2, 2, 3, 0], np.int32)
  valid = np.array([1, 1, 1, 1, 1, 1, 0], bool)
  lp = np.log([1.0, 0.6, 0.3, 0.6 * 0.5, 0.6 * 0.4, 0.6 * 0.5 * 0.9, 1.0])
  scores = np.where(valid, lp, -np.inf).astype(np.float32)
  return RoundTrace(round=3, sequence=0, start=7, tokens=tokens, parents=parents, depths=depths, scores=scores,
                    valid=valid, target_tokens=np.array([11, 13, 0, 16, 0, 0, 0], np.int32), path=[0, 1, 3],
                    bonus=16)


def test_node_roles_colour_the_accepted_path():
  t = hand_tree()
  assert node_roles(t.parents, t.valid, t.path) == ["root", "accepted", "rejected", "accepted", "rejected",
                                                    "rejected", "padding"]
  assert node_roles(t.parents, t.valid, [0]) == ["root"] + ["rejected"] * 5 + ["padding"]
  with pytest.raises(ValueError, match="not a valid child"):
    node_roles(t.parents, t.valid, [0, 3])          # 3 is a grandchild of the root
  with pytest.raises(ValueError, match="start at the root"):
    node_roles(t.parents, t.valid, [1, 3])


def test_trace_edges_and_json():
  t = hand_tree()
  p = t.edge_probs()
  np.testing.assert_allclose(p[1:6], [0.6, 0.3, 0.5, 0.4, 0.9], rtol=1e-5)
  assert np.isnan(p[0]) and np.isnan(p[6])
  assert t.accepted_tokens == [11, 13, 16]
  d = t.to_json()
  assert d["path"] == [0, 1, 3] and d["num_valid"] == 6 and len(d["nodes"]) == 6
  assert [n["accepted"] for n in d["nodes"]] == [True, True, False, True, False, False]
  json.dumps(d)


class Letters:
  def decode(self, ids):
    return "".join(" \n"[i % 2] + chr(ord("a") + i % 26) for i in ids)


def test_plot_tree_writes_png(tmp_path):
  for tok in (None, Letters()):
    out = tmp_path / f"tree_{tok is None}.png"
    fig = plot_tree(hand_tree(), tok, str(out))
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert fig.axes[0].get_title(loc="left").startswith("round 3: 5 draft nodes, 2 accepted + bonus = 3 tokens")
  assert token_label(3, Letters()) == "\u21b5d" and token_label(2, Letters()) == "\u2423c"
  assert token_label(7, None) == "7"


@pytest.fixture(scope="module")
def random_engine():
  import jax.numpy as jnp
  from ddtree_jax.cli.common import random_models
  from ddtree_jax.engine import Engine
  target, cfg, drafter, dcfg, tok, _ = random_models(jnp.float32, want_drafter=True)
  return Engine(target, cfg, drafter, dcfg)


# ddtree at T=0 in `make test`; the chain and T>0 in the end-to-end tier (`make test-e2e`).
@pytest.mark.parametrize("mode, temperature", [("ddtree", 0.0), pytest.param("dflash", 0.0, marks=pytest.mark.e2e),
                                               pytest.param("ddtree", 1.0, marks=pytest.mark.e2e)])
def test_tracing_keeps_tokens_and_matches_rounds(random_engine, mode, temperature):
  from ddtree_jax.sampling import SamplingParams
  kw = dict(mode=mode, budget=6, max_new_tokens=14, sampling=SamplingParams(temperature), seed=3)
  prompts = [[5, 6, 7, 8], [9, 10]]
  plain = random_engine.generate(prompts, **kw)
  with tracing(random_engine) as traces:
    traced = random_engine.generate(prompts, **kw)
  assert [r.token_ids for r in traced] == [r.token_ids for r in plain]
  assert "_compiled_fn" not in random_engine.__dict__      # the engine is restored
  for i, r in enumerate(traced):
    mine = sorted((t for t in traces if t.sequence == i), key=lambda t: t.round)
    assert [t.round for t in mine] == list(range(r.rounds))
    # Each trace's accepted tokens + bonus are what the compiled round emitted (cut at max_new_tokens).
    emitted = [tok for t in mine for tok in t.accepted_tokens]
    assert emitted[:len(r.token_ids) - 1] == r.token_ids[1:]
    assert [len(t.path) for t in mine][:-1] == r.accepted_per_round[:-1]
    for t in mine:
      node_roles(t.parents, t.valid, t.path)                # a valid root-first chain


@pytest.mark.e2e
def test_generate_trace_dir_same_tokens(tmp_path):
  from configs.tiny import tiny, tiny_drafter
  from ddtree_jax.checkpoint.synthetic import write_drafter_checkpoint, write_target_checkpoint
  cfg = tiny(stop_token_ids=())
  target = write_target_checkpoint(str(tmp_path / "target"), cfg, layout="k26", n_shards=2)
  drafter = write_drafter_checkpoint(str(tmp_path / "drafter"), tiny_drafter(cfg, block_size=4))
  common = (f"--model_dir={target}", f"--drafter_dir={drafter}", "--prompt_ids=5,6,7,8", "--mode=ddtree",
            "--budget=6", "--max_new_tokens=10", "--dtype=float32")
  r = run_cli(*common, f"--output_json={tmp_path / 'plain.json'}")
  assert r.returncode == 0, r.stderr[-2000:]
  trace_dir = tmp_path / "trace"
  r = run_cli(*common, f"--output_json={tmp_path / 'traced.json'}", f"--trace_dir={trace_dir}")
  assert r.returncode == 0, r.stderr[-2000:]
  plain = json.loads((tmp_path / "plain.json").read_text())["results"][0]
  traced = json.loads((tmp_path / "traced.json").read_text())["results"][0]
  assert traced["token_ids"] == plain["token_ids"]
  rounds = traced["stats"]["rounds"]
  names = sorted(os.listdir(trace_dir))
  assert names == sorted([f"round_{k:04d}_seq_0.{ext}" for k in range(rounds) for ext in ("json", "png")])
  emitted = []
  for k in range(rounds):
    rec = json.loads((trace_dir / f"round_{k:04d}_seq_0.json").read_text())
    assert rec["round"] == k and rec["path"][0] == 0
    emitted += rec["accepted_tokens"]
    assert (trace_dir / f"round_{k:04d}_seq_0.png").stat().st_size > 0
  assert emitted[:len(traced["token_ids"]) - 1] == traced["token_ids"][1:]
  r = run_cli(*common[:3], "--mode=ar", f"--trace_dir={trace_dir}")
  assert r.returncode == 2 and "--trace_dir: mode ar has no draft tree" in r.stderr
