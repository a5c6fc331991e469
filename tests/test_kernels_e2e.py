"""End to end on the GPU: DDTree rounds of the embedded default model with the Pallas kernels
(MLA tree attention, INT4 MoE, tree build / walk) give the tokens of the plain-XLA reference path."""
import functools

import jax
import jax.numpy as jnp
import pytest

import custom_calls
from ddtree_jax import engine as engine_mod
from ddtree_jax.spec import tree as spec_tree
from ddtree_jax.spec import verify as spec_verify
from ddtree_jax.engine import Engine
from ddtree_jax.train import pipeline

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a GPU backend (jax.default_backend() == 'gpu')"),
]

PROMPTS = ["def fibonacci(n):\n", "import os\n\n\nclass Config:\n    def __init__(self, path):\n"]


def _generate(mode, budget):
  target, cfg, drafter, dcfg, tok = pipeline.load_pair("checkpoints/default/target", "checkpoints/default/drafter",
                                                       dtype=jnp.float32)
  eng = Engine(target, cfg, drafter, dcfg)
  res = eng.generate([tok.encode(p) for p in PROMPTS], mode=mode, budget=budget, max_new_tokens=48)
  return [r.token_ids for r in res]


@pytest.mark.parametrize("mode,budget", [("ar", 1), ("ddtree", 32)])
def test_kernels_match_reference_tokens(monkeypatch, mode, budget):
  engine_mod._COMPILED.clear()                       # programs are cached per structure: compile each path anew
  with_kernels = _generate(mode, budget)
  engine_mod._COMPILED.clear()
  for module, name in ((custom_calls, "mla_attention"), (custom_calls, "routed_experts_int4"),
                       (spec_tree, "tree_build"), (spec_verify, "tree_walk")):
    monkeypatch.setattr(module, name, functools.partial(getattr(module, name), impl="xla"))
  reference = _generate(mode, budget)
  engine_mod._COMPILED.clear()
  assert with_kernels == reference
