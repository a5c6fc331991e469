"""Capture what one speculative round did: the draft tree, the target's token at every node, the accepted path.

`trace_round` recomputes the pieces of `spec.step.speculative_round` (draft_distributions, build_tree, the
target's verify forward, choose_tokens, walk_tree) from a state, in a separate jitted function that does not
donate or change the state and leaves the engine's compiled round untouched. Given the same state it computes
the same tokens as the round (same functions, same PRNG split), so it can run just before each round,
which `tracing` arranges without touching the engine's code:

  with tracing(engine) as traces:
    engine.generate(prompts, mode="ddtree", budget=16)
  plot_tree(traces[0], tokenizer=tok, path="round0.png")
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

_TRACE_FNS: dict = {}   # (RoundSpec, graphdefs) -> jitted trace function


@dataclasses.dataclass
class RoundTrace:
  """One sequence's round. Node arrays have N+1 entries (index 0 = the root, the round's input token)."""
  round: int                  # 0-based round index of this sequence
  sequence: int               # batch row
  start: int                  # committed length before the round (the root's position)
  tokens: np.ndarray          # [N+1] int32 draft tokens (root = bonus token of the previous round)
  parents: np.ndarray         # [N+1] int32 (-1 for the root and padding)
  depths: np.ndarray          # [N+1] int32
  scores: np.ndarray          # [N+1] fp32 drafter log q(prefix); root 0, padding -inf
  valid: np.ndarray           # [N+1] bool
  target_tokens: np.ndarray   # [N+1] int32 the target's choice after each node
  path: list[int]             # accepted node indices, root first
  bonus: int                  # the target's token after the last accepted node

  @property
  def accepted_tokens(self) -> list[int]:
    """Tokens this round emits: the accepted draft tokens (root excluded), then the bonus."""
    return [int(self.tokens[i]) for i in self.path[1:]] + [self.bonus]

  def edge_probs(self) -> np.ndarray:
    """[N+1] drafter probability of each node given its parent: exp(score - parent's score); root/padding nan."""
    p = np.full(self.tokens.shape, np.nan, np.float64)
    for i in range(1, len(p)):
      if self.valid[i] and self.parents[i] >= 0:
        p[i] = float(np.exp(np.float64(self.scores[i]) - np.float64(self.scores[self.parents[i]])))
    return p

  def to_json(self, tokenizer=None) -> dict:
    d = {"round": self.round, "sequence": self.sequence, "start": self.start,
         "budget": int(len(self.tokens) - 1), "num_valid": int(self.valid.sum()),
         "path": [int(i) for i in self.path], "accepted_tokens": self.accepted_tokens, "bonus": int(self.bonus),
         "nodes": []}
    probs = self.edge_probs()
    for i in range(len(self.tokens)):
      if not self.valid[i]:
        continue
      node = {"index": i, "token": int(self.tokens[i]), "parent": int(self.parents[i]),
              "depth": int(self.depths[i]), "score": float(self.scores[i]),
              "edge_prob": None if np.isnan(probs[i]) else float(probs[i]),
              "target_token": int(self.target_tokens[i]), "accepted": i in self.path}
      if tokenizer is not None:
        node["text"] = tokenizer.decode([int(self.tokens[i])])
      d["nodes"].append(node)
    if tokenizer is not None:
      d["accepted_text"] = tokenizer.decode(self.accepted_tokens)
    return d

  def save_json(self, path: str, tokenizer=None) -> None:
    with open(path, "w") as f:
      json.dump(self.to_json(tokenizer), f, indent=1)


def _trace_fn(engine, spec):
  key = (spec, engine._t_graph, engine._d_graph)
  if key not in _TRACE_FNS:
    from ddtree_jax.sampling import choose_tokens
    from ddtree_jax.spec.step import draft_distributions
    from ddtree_jax.spec.tree import build_tree
    from ddtree_jax.spec.verify import walk_tree
    t_graph, d_graph = engine._t_graph, engine._d_graph

    def fn(t_params, d_params, state):   # mirrors spec/step.py:speculative_round up to the walk
      target, drafter = nnx.merge(t_graph, t_params), nnx.merge(d_graph, d_params)
      n = spec.budget
      top_lp, top_tok = draft_distributions(target, drafter, state, spec)
      tree = build_tree(top_lp, top_tok, n, root_tokens=state.bonus)
      tokens = jnp.where(tree.valid, tree.tokens, 0)
      positions = state.cache.lengths[:, None] + tree.depths
      mask = (tree.ancestors & tree.valid[:, None, :]) | jnp.eye(n + 1, dtype=bool)[None]
      out = target(tokens, positions, state.cache, mask, feature_layers=spec.feature_layers)
      _, sub = jax.random.split(state.key)
      target_tokens = choose_tokens(out.logits, sub, spec.sampling, getattr(target, "mesh", None))
      path, n_acc, bonus = walk_tree(tokens, tree.parents, tree.valid, target_tokens, spec.block_size - 1)
      return dict(tokens=tree.tokens, parents=tree.parents, depths=tree.depths, scores=tree.scores,
                  valid=tree.valid, target_tokens=target_tokens, path=path, n_acc=n_acc, bonus=bonus,
                  start=state.cache.lengths, done=state.done, rounds=state.rounds)
    _TRACE_FNS[key] = jax.jit(fn)
  return _TRACE_FNS[key]


def trace_round(engine, state, spec, rows: Optional[list[int]] = None) -> list[RoundTrace]:
  """The round that `spec` would run next on `state`, per active sequence (or the given rows).

  engine: the Engine (its models); state: a GenerationState before the round (not modified, not donated);
  spec: the RoundSpec (mode "dflash" or "ddtree"). Returns one RoundTrace per sequence not yet done.
  """
  if spec.mode == "ar":
    raise ValueError("trace_round: mode 'ar' has no draft tree (use 'dflash' or 'ddtree')")
  r = jax.device_get(_trace_fn(engine, spec)(engine._t_params, engine._d_params, state))
  r = {k: np.asarray(v) for k, v in r.items()}
  b = r["tokens"].shape[0]
  traces = []
  for i in (range(b) if rows is None else rows):
    if r["done"][i]:
      continue
    n_acc = int(r["n_acc"][i])
    traces.append(RoundTrace(round=int(r["rounds"][i]), sequence=i, start=int(r["start"][i]),
                             tokens=r["tokens"][i], parents=r["parents"][i], depths=r["depths"][i],
                             scores=r["scores"][i], valid=r["valid"][i], target_tokens=r["target_tokens"][i],
                             path=[int(x) for x in r["path"][i, :n_acc]], bonus=int(r["bonus"][i])))
  return traces


@contextlib.contextmanager
def tracing(engine, on_round: Optional[Callable] = None):
  """Within the block, `engine` calls on_round(state, spec) before every speculative round, with the state
  the round is about to consume (donated right after: copy what you keep). The default callback records
  `trace_round` of every round into the yielded list:

    with tracing(engine) as traces:
      engine.generate(prompts, mode="ddtree", budget=16)

  Only this engine instance is affected (its `_compiled_fn` is wrapped, and restored on exit); its speculative
  rounds run one per compiled call (the same computation as `rounds_per_call` rounds a call, so the generated
  tokens are the same).
  """
  traces: list[RoundTrace] = []
  if on_round is None:
    on_round = lambda state, spec: traces.extend(trace_round(engine, state, spec))
  compiled = engine._compiled_fn

  def traced_compiled_fn(kind, spec, *args):
    if kind != "round" or spec.mode == "ar":
      return compiled(kind, spec, *args)
    # one round a call, so that every round is traced (same rounds, same tokens: spec/step.py rounds)
    fn = compiled(kind, dataclasses.replace(spec, rounds_per_call=1), *args)

    def traced(t_params, d_params, state):
      on_round(state, spec)
      return fn(t_params, d_params, state)
    return traced

  engine._compiled_fn = traced_compiled_fn
  try:
    yield traces
  finally:
    del engine._compiled_fn


def save_traces(traces: list[RoundTrace], out_dir: str, tokenizer=None, *, png: bool = True) -> list[str]:
  """Writes each trace as <out_dir>/round_RRRR_seq_S.json (+ .png of its tree). Returns the JSON paths."""
  import os
  from ddtree_jax.viz.tree_plot import plot_tree
  os.makedirs(out_dir, exist_ok=True)
  paths = []
  for t in traces:
    stem = os.path.join(out_dir, f"round_{t.round:04d}_seq_{t.sequence}")
    t.save_json(stem + ".json", tokenizer)
    if png:
      plot_tree(t, tokenizer, stem + ".png")
    paths.append(stem + ".json")
  return paths
