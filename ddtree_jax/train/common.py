"""Pieces shared by the two trainers: orbax checkpoints of a training state, the learning-rate
schedule, a time-boxed step horizon, AdamW, loss-curve plots."""
from __future__ import annotations

import json
import os
from typing import Any, Optional

import jax
import jax.numpy as jnp
import optax


def warmup_cosine(step, horizon: int, warmup: int, peak: float, min_ratio: float):
  """Linear warmup to `peak`, cosine to `peak * min_ratio` at `horizon` (jnp-friendly)."""
  step = jnp.asarray(step, jnp.float32)
  warm = peak * (step + 1) / max(warmup, 1)
  frac = jnp.clip((step - warmup) / max(horizon - warmup, 1), 0.0, 1.0)
  cos = peak * (min_ratio + (1 - min_ratio) * 0.5 * (1 + jnp.cos(jnp.pi * frac)))
  return jnp.where(step < warmup, warm, cos)


def adamw(weight_decay: float, clip: float, b2: float = 0.95):
  """AdamW without the learning rate (applied per step by the caller, so the schedule's horizon can
  be fixed once the step time is known): clip -> Adam -> decoupled weight decay on >= 2-D params."""
  mask = lambda p: {k: v.ndim >= 2 for k, v in p.items()}
  return optax.chain(optax.clip_by_global_norm(clip), optax.scale_by_adam(b1=0.9, b2=b2, eps=1e-8),
                     optax.add_decayed_weights(weight_decay, mask=mask))


class Checkpointer:
  """Orbax checkpoints of a training state pytree (+ a JSON of metadata), `keep` most recent."""

  def __init__(self, directory: str, keep: int = 2):
    import orbax.checkpoint as ocp
    self._ocp = ocp
    self.directory = os.path.abspath(directory)
    os.makedirs(self.directory, exist_ok=True)
    self.mgr = ocp.CheckpointManager(self.directory, options=ocp.CheckpointManagerOptions(max_to_keep=keep))

  def latest_step(self) -> Optional[int]:
    return self.mgr.latest_step()

  def save(self, step: int, state: Any, meta: dict):
    ocp = self._ocp
    leaves = {str(i): x for i, x in enumerate(jax.tree.leaves(state))}
    self.mgr.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(leaves),
                                                meta=ocp.args.JsonSave(meta)), force=True)
    self.mgr.wait_until_finished()

  def restore(self, like: Any, step: Optional[int] = None) -> tuple[Any, dict]:
    ocp = self._ocp
    step = self.latest_step() if step is None else step
    leaves, treedef = jax.tree.flatten(like)
    abstract = {str(i): jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=getattr(x, "sharding", None))
                for i, x in enumerate(leaves)}
    r = self.mgr.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract),
                                                       meta=ocp.args.JsonRestore()))
    restored = [r["state"][str(i)] for i in range(len(leaves))]
    return jax.tree.unflatten(treedef, restored), dict(r["meta"])

  def close(self):
    self.mgr.close()


class Horizon:
  """Decides how many steps fit in a time budget, from the measured step time (fixed once known)."""

  def __init__(self, max_steps: int, time_budget_s: Optional[float], measure_steps: int = 20,
               overhead: float = 0.08):
    self.max_steps = max_steps
    self.budget = time_budget_s
    self.measure = measure_steps
    self.overhead = overhead
    self.value: Optional[int] = None if time_budget_s else max_steps
    self._t0 = None
    self._s0 = None

  def observe(self, step: int, elapsed_s: float, now: float):
    """Call after each step (`elapsed_s` since this run's start, `now` = time.perf_counter())."""
    if self.value is not None:
      return
    if self._t0 is None:
      self._t0, self._s0 = now, step
      return
    if step - self._s0 >= self.measure:
      per = (now - self._t0) / (step - self._s0)
      left = self.budget - elapsed_s
      value = int(min(self.max_steps, step + max(0, left) / (per * (1 + self.overhead))))
      # Several processes run the same steps: all take process 0's horizon (each measured its own time).
      from ddtree_jax.train.data_parallel import from_process_0
      self.value = from_process_0(value)

  @property
  def schedule_horizon(self) -> int:
    return self.value if self.value is not None else self.max_steps


def plot_curves(path: str, title: str, curves: dict[str, tuple[list, list]], ylabel: str = "loss"):
  """curves: {label: (steps, values)} -> PNG (skipped without matplotlib)."""
  try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
  except ImportError:
    return None
  fig, ax = plt.subplots(figsize=(7, 4))
  for label, (xs, ys) in curves.items():
    if xs:
      ax.plot(xs, ys, label=label, marker="o" if len(xs) < 30 else None, markersize=3)
  ax.set_xlabel("step")
  ax.set_ylabel(ylabel)
  ax.set_title(title)
  ax.grid(alpha=0.3)
  ax.legend()
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path


def write_json(path: str, obj):
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    json.dump(obj, f, indent=1)
  os.replace(tmp, path)


def ema(values, alpha=0.1):
  out, m = [], None
  for v in values:
    m = v if m is None else (1 - alpha) * m + alpha * v
    out.append(m)
  return out
