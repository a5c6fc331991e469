"""`--budget=auto`: choose the DDTree budget that maximises expected tokens per second.

Expected tokens of a round with budget n, from the drafter's own distribution (REFERENCE.md section 3):
  E(n) = 1 + sum of q(u) over the tree's n nodes,
the +1 being the bonus token. The best-first build pops nodes in non-increasing score order and the
optimal n-node tree is the first n nodes of the optimal N-node tree (n <= N), so one tree of budget N
gives E(n) for every candidate n <= N: a cumulative sum of exp(Tree.scores). The compiled round keeps a
per-request running estimate (exponential average) of E(n) for each candidate in the state
(`GenerationState.expected`, [B, C]); candidates above the round's budget keep their last value.

On the host, `AutoBudget` picks among precompiled budgets (default 8, 16, 32, 64, 128):
  1. calibration: each candidate runs `calib_rounds` real rounds (largest first, so that E(n) is known
     for all candidates after the first round); the wall time of each round (the round plus the host's
     read of the done flags) is recorded. Rounds are real work: every budget is lossless, so the tokens
     are the same whichever budget runs. The measured costs and the last choice are kept in the engine
     (`memory`, per batch size), so later runs skip calibration and start at the last choice -- or a cost function is given (e.g. the K2.6
     cost model: `cost_fn=lambda n: model.round_s("ddtree", n, ctx)`) and nothing is timed;
  2. every `redecide_every` rounds: n* = argmax_n  sum over active requests of E_b(n) / cost(n);
  3. every `explore_every` rounds, one round at a neighbouring candidate of n* (alternately larger and
     smaller), to refresh the larger one's E(n) (otherwise stale) and the measured costs.
The cost of a budget is the minimum of its measured rounds while fewer than 3 exist (the first run of a
compiled program carries one-time overhead), then their median (a window of the last 16).
"""
from __future__ import annotations

import statistics
import time
from typing import Callable, Optional, Sequence

import jax.numpy as jnp
import numpy as np

DEFAULT_CANDIDATES = (8, 16, 32, 64, 128)
EMA = 0.3   # weight of the newest round in the running estimate


def tree_expected(scores, valid, candidates: Sequence[int]):
  """scores, valid: [B, N+1] (Tree.scores / Tree.valid, index 0 the root) -> ([B, C] E(n) = 1 + sum of
  q over the first n nodes, [C] bool: n <= N, i.e. known from this tree)."""
  n = scores.shape[1] - 1
  q = jnp.where(valid[:, 1:], jnp.exp(scores[:, 1:].astype(jnp.float32)), 0.0)
  cum = jnp.cumsum(q, axis=1)                                                    # [B, N]
  vals = jnp.stack([1.0 + cum[:, min(c, n) - 1] for c in candidates], axis=1)     # [B, C]
  known = jnp.asarray([c <= n for c in candidates])
  return vals, known


def update_expected(expected, scores, valid, active, candidates: Sequence[int], alpha: float = EMA):
  """The in-round update of GenerationState.expected [B, C] (0 = no estimate yet)."""
  vals, known = tree_expected(scores, valid, candidates)
  new = jnp.where(expected > 0, (1 - alpha) * expected + alpha * vals, vals)
  return jnp.where(known[None, :] & active[:, None], new, expected)


class AutoBudget:
  """Host-side controller: `pick(state)` before each round returns the budget to run."""

  def __init__(self, candidates: Sequence[int] = DEFAULT_CANDIDATES, *, cost_fn: Optional[Callable[[int], float]] = None,
               memory: Optional[dict] = None, redecide_every: int = 4, explore_every: int = 16,
               calib_rounds: int = 2):
    """memory: a dict kept by the caller across runs (the engine keeps one per batch size): the measured
    costs ("costs": budget -> seconds of recent rounds) and the last choice ("last")."""
    cands = tuple(sorted(set(int(c) for c in candidates)))
    if not cands or cands[0] < 1:
      raise ValueError(f"auto budget: candidates must be >= 1, got {candidates}")
    self.candidates = cands
    self.cost_fn = cost_fn
    self.memory = {} if memory is None else memory
    self.costs = self.memory.setdefault("costs", {})            # budget -> list of measured seconds
    self.redecide_every = max(1, redecide_every)
    self.explore_every = max(2, explore_every)
    self.calib_rounds = calib_rounds
    self._queue = []
    if cost_fn is None:
      for c in reversed(cands):
        self._queue += [c] * max(0, calib_rounds - len(self.costs.get(c, [])))
    last = self.memory.get("last")
    if self._queue or last not in cands:
      if not self._queue or self._queue[0] != cands[-1]:
        self._queue.insert(0, cands[-1])      # the first round at the largest budget: E(n) for all n
      last = cands[-1]
    # else: calibrated before; start at the last choice (larger candidates' E(n) come from exploring)
    self.current = last
    self.rounds = 0
    self.history: list[int] = []
    self._last_pick: Optional[float] = None
    self._last_budget: Optional[int] = None
    self._decide_now = False

  @property
  def max_budget(self) -> int:
    return self.candidates[-1]

  def cost(self, n: int) -> float:
    if self.cost_fn is not None:
      return float(self.cost_fn(n))
    ts = self.costs.get(n)
    if not ts:
      return float("nan")
    return statistics.median(ts) if len(ts) >= 3 else min(ts)

  def observe(self, budget: int, seconds: float) -> None:
    if self.cost_fn is None:
      ts = self.costs.setdefault(budget, [])
      ts.append(seconds)
      del ts[:-16]                               # a running window

  def choose(self, expected: np.ndarray, active: np.ndarray) -> int:
    """expected: [B, C] host array; active: [B] bool -> the budget maximising expected tokens/s."""
    rows = expected[active] if active.any() else expected
    best, best_rate = self.current, -1.0
    for j, c in enumerate(self.candidates):
      cost = self.cost(c)
      if not np.isfinite(cost) or cost <= 0 or not (rows[:, j] > 0).all():   # unmeasured, or E(n) unknown
        continue
      rate = float(np.sum(rows[:, j])) / cost
      if rate > best_rate:
        best, best_rate = c, rate
    return best

  def pick(self, state) -> int:
    """Called right before each round (after the host read the done flags): records the previous
    round's wall time, then returns the budget of the next round."""
    now = time.perf_counter()
    if self._last_pick is not None and self._last_budget is not None:
      self.observe(self._last_budget, now - self._last_pick)
    if self._queue:
      n = self._queue.pop(0)
      self._decide_now = not self._queue
    else:
      if self._decide_now or self.rounds % self.redecide_every == 0:
        self._decide_now = False
        from ddtree_jax.engine import _host
        self.current = self.choose(_host(state.expected), ~_host(state.done))
      n = self.current
      if self.rounds % self.explore_every == self.explore_every - 1:
        # alternately the next larger and the next smaller candidate: refreshes the larger one's E(n)
        # and both neighbours' measured cost (a cost measured once too high is not stuck for ever)
        i = self.candidates.index(self.current)
        j = i + 1 if (self.rounds // self.explore_every) % 2 == 0 else i - 1
        if 0 <= j < len(self.candidates):
          n = self.candidates[j]
    self.rounds += 1
    self.history.append(n)
    self._last_budget = n
    self._last_pick = time.perf_counter()
    return n

  def finish(self) -> None:
    """Records the last round's time and the choice (call after the loop ends)."""
    if self._last_pick is not None and self._last_budget is not None:
      self.observe(self._last_budget, time.perf_counter() - self._last_pick)
    self._last_pick = None
    if not self._queue:
      self.memory["last"] = self.current

  def summary(self) -> dict:
    counts = {c: self.history.count(c) for c in self.candidates if c in self.history}
    return dict(candidates=list(self.candidates), rounds_per_budget=counts,
                chosen=self.current, cost_s={c: self.cost(c) for c in self.candidates},
                cost_source="cost_fn" if self.cost_fn is not None else "measured rounds")
