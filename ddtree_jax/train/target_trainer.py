"""Pretraining of the small DeepSeek-V3 (Kimi K2.6 architecture) target on a token stream.

fp32 master weights, bf16 compute (the module is built in bf16; parameters are cast inside the step),
AdamW (clip 1.0, b2 0.95, decoupled decay on matrices) with warmup + cosine, next-token cross-entropy.
Routed experts train through a fixed-capacity dispatch (`train/forward.py`); the noaux_tc
`e_score_correction_bias` is not trained by gradient but by DeepSeek-V3's load-balancing rule
(bias += rate * sign(mean load - load)). Resumable: orbax checkpoints of (params, optimizer state)
every `ckpt_every` steps with the step horizon, history and data position in the metadata.
On a mesh (`mesh=`): data parallel (`train/data_parallel.py`), the same losses as on one device.
"""
from __future__ import annotations

import dataclasses
import math
import os
import re
import time
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ddtree_jax import sharding
from ddtree_jax.config import ModelConfig
from ddtree_jax.train import common, data_parallel
from ddtree_jax.train.forward import target_forward
from ddtree_jax.train.params import ModuleTemplate

_BIAS = re.compile(r"^layers\.(\d+)\.mlp\.gate\.e_score_correction_bias$")


def target_template(cfg: ModelConfig, seed: int = 0, dtype=jnp.bfloat16) -> ModuleTemplate:
  from ddtree_jax.model.deepseek import DeepseekV3
  return ModuleTemplate(lambda: DeepseekV3(cfg, dtype=dtype, rngs=nnx.Rngs(seed)))


def sample_windows(stream: np.ndarray, batch: int, length: int, rng: np.random.Generator) -> np.ndarray:
  """`batch` random windows of `length` tokens from a token stream -> int32 [batch, length]."""
  starts = rng.integers(0, len(stream) - length, size=batch)
  return np.stack([stream[s:s + length] for s in starts]).astype(np.int32)


def eval_windows(stream: np.ndarray, length: int, max_tokens: int) -> np.ndarray:
  """Consecutive non-overlapping windows from the start of the stream (deterministic)."""
  n = max(1, min(len(stream) // length, max(1, max_tokens // length)))
  return stream[:n * length].reshape(n, length).astype(np.int32)


def make_eval_fn(tpl: ModuleTemplate):
  """A jitted (params, tokens [B, T+1]) -> (sum of CE, count); one per template (cached on it)."""
  cached = getattr(tpl, "_eval_fn", None)
  if cached is not None:
    return cached

  @jax.jit
  def f(params, tokens):
    model = tpl.merge(params)
    out = target_forward(model, tokens[:, :-1], capacity_factor=None)
    logits = model.logits(out["hidden"])
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:])
    return jnp.sum(ce), ce.size
  tpl._eval_fn = f
  return f


def evaluate(tpl: ModuleTemplate, params, stream: np.ndarray, seq_len: int, batch: int, max_tokens: int,
             fn=None, mesh=None) -> float:
  """Mean next-token cross-entropy (nats) over the first `max_tokens` of `stream` (exact MoE).
  mesh: the mesh `params` live on (windows split over "data" when they divide)."""
  fn = fn or make_eval_fn(tpl)
  w = eval_windows(stream, seq_len + 1, max_tokens)
  tot, n = 0.0, 0
  for i in range(0, len(w), batch):
    s, c = fn(params, data_parallel.place_batch(w[i:i + batch], mesh))
    tot, n = tot + float(s), n + int(c)
  return tot / max(n, 1)


@dataclasses.dataclass
class TrainResult:
  params: dict            # fp32 master weights (the best by validation loss when evaluated)
  history: dict
  workdir: str
  template: ModuleTemplate = None


def train_target(cfg: ModelConfig, hp, train_stream: np.ndarray, val_stream: np.ndarray, workdir: str, *,
                 time_budget_s: Optional[float] = None, resume: bool = False, progress: bool = True,
                 log: Callable[[str], None] = print, mesh=None, compute_dtype=jnp.bfloat16) -> TrainResult:
  """Trains until hp.max_steps or the time budget (the cosine horizon is fitted to the budget).

  mesh: a ("data", "model") mesh to train on, data parallel (hp.batch must divide by its "data" size);
  the returned params live on it. compute_dtype: the module's dtype (bf16; fp32 for exact comparisons)."""
  data_parallel.check_batch(hp.batch, mesh)
  os.makedirs(workdir, exist_ok=True)
  tpl = target_template(cfg, hp.seed, compute_dtype)
  params = tpl.init(hp.seed)
  moe_layers = [i for i in range(cfg.num_hidden_layers) if cfg.is_moe_layer(i)]
  tx = common.adamw(hp.weight_decay, hp.clip)
  state = {"params": params, "opt": tx.init(params)}
  state, state_shardings = data_parallel.place_state(state, mesh, sharding.TARGET_RULES, cfg)   # by the rules
  ckpt = common.Checkpointer(os.path.join(workdir, "orbax"))
  history = {"step": [], "loss": [], "val_step": [], "val_loss": [], "dropped": [], "horizon": None,
             "tokens_per_step": hp.batch * hp.seq_len, "best_val": None, "best_step": None}
  start = 0
  if resume and ckpt.latest_step() is not None:
    state, meta = ckpt.restore(state)
    history = meta["history"]
    start = int(meta["step"])
    log(f"resumed from step {start} ({ckpt.directory})")
  horizon = common.Horizon(hp.max_steps, time_budget_s)
  if history.get("horizon"):
    horizon.value = int(history["horizon"])

  def loss_fn(p, tokens):
    model = tpl.merge(p)
    out = target_forward(model, tokens[:, :-1], capacity_factor=hp.capacity_factor)
    logits = model.logits(out["hidden"])
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()
    return ce, (out["loads"], out["dropped"])

  def step_fn(state, tokens, lr):       # tokens: [batch, seq_len + 1], split over "data"
    (loss, (loads, dropped)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state["params"], tokens)
    updates, opt = tx.update(grads, state["opt"], state["params"])
    new = {}
    for k, p in state["params"].items():
      m = _BIAS.match(k)
      if m:   # aux-loss-free balancing: raise the bias of under-loaded experts
        load = loads[moe_layers.index(int(m.group(1)))]
        new[k] = p + hp.bias_update_rate * jnp.sign(jnp.mean(load) - load)
      else:
        new[k] = p - lr * updates[k]
    return {"params": new, "opt": opt}, loss, jnp.mean(dropped) if dropped.size else jnp.float32(0)
  step_fn = data_parallel.jit_step(step_fn, mesh, state_shardings, 2)

  eval_fn = make_eval_fn(tpl)
  best = None
  t_start = time.perf_counter()
  bar = None
  if progress and data_parallel.is_writer():
    from tqdm import tqdm
    bar = tqdm(total=horizon.schedule_horizon, initial=start, desc="target", dynamic_ncols=True, mininterval=2)
  step = start
  pending = []
  while step < horizon.schedule_horizon:
    rng = np.random.default_rng((hp.seed, step))
    tokens = data_parallel.place_batch(sample_windows(train_stream, hp.batch, hp.seq_len + 1, rng), mesh)
    lr = np.float32(common.warmup_cosine(step, horizon.schedule_horizon, hp.warmup_steps, hp.lr, hp.min_lr_ratio))
    state, loss, dropped = step_fn(state, tokens, lr)
    pending.append((step, loss, dropped))
    step += 1
    if step == start + 1:
      jax.block_until_ready(loss)   # compile outside the measured time
      t_start = time.perf_counter()
    now = time.perf_counter()
    if time_budget_s:
      if horizon.value is None:
        jax.block_until_ready(loss)
        now = time.perf_counter()
      horizon.observe(step, now - t_start, now)
      if horizon.value is not None and history.get("horizon") is None:
        history["horizon"] = horizon.value
        if bar is not None:
          bar.total = horizon.value
          bar.refresh()
    if len(pending) >= 20 or step >= horizon.schedule_horizon:
      for s, l, d in pending:
        history["step"].append(s)
        history["loss"].append(float(l))
        history["dropped"].append(float(d))
      pending = []
      if bar is not None:
        bar.set_postfix(loss=f"{history['loss'][-1]:.3f}", drop=f"{history['dropped'][-1]:.3f}")
    if bar is not None:
      bar.update(1)
    last = step >= horizon.schedule_horizon
    if step % hp.eval_every == 0 or last:
      v = evaluate(tpl, state["params"], val_stream, hp.seq_len, hp.batch, hp.eval_tokens, eval_fn, mesh)
      history["val_step"].append(step)
      history["val_loss"].append(v)
      if best is None or v < history["best_val"]:
        history["best_val"], history["best_step"] = v, step
        best = jax.tree.map(lambda x: x, state["params"])
      log(f"step {step}: train {history['loss'][-1]:.4f}  val {v:.4f} (ppl {math.exp(v):.2f})")
    if step % hp.ckpt_every == 0 or last:
      for s, l, d in pending:
        history["step"].append(s)
        history["loss"].append(float(l))
        history["dropped"].append(float(d))
      pending = []
      ckpt.save(step, state, {"step": step, "history": history})
  if bar is not None:
    bar.close()
  ckpt.close()
  history["train_seconds"] = time.perf_counter() - t_start
  if data_parallel.is_writer():
    common.write_json(os.path.join(workdir, "target_history.json"), history)
    common.plot_curves(os.path.join(workdir, "target_loss.png"), f"target pretraining ({cfg.num_hidden_layers} layers)",
                       {"train (EMA)": (history["step"], common.ema(history["loss"], 0.05)),
                        "val": (history["val_step"], history["val_loss"])})
  return TrainResult(params=best if best is not None else state["params"], history=history, workdir=workdir, template=tpl)
