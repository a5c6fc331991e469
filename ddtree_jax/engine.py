"""The generation engine: prefill, the round loop, stopping, batching, streaming and statistics.

Every round is one compiled XLA program (`spec/step.py`) over a donated `GenerationState`. The host
only reads the `done` flags (and, when streaming, the new tokens) between rounds.
"""
from __future__ import annotations

import dataclasses
import math
import time
from typing import Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ddtree_jax.cache import init_latent_cache
from ddtree_jax.config import DFlashConfig, ModelConfig
from ddtree_jax.sampling import SamplingParams
from ddtree_jax.spec.state import GenerationState

MODES = ("ar", "dflash", "ddtree")


@dataclasses.dataclass
class GenerationResult:
  token_ids: list[int]
  prompt_tokens: int
  rounds: int
  accepted_per_round: list[int]   # tokens emitted by each round (the bonus included)
  tau: float                      # mean tokens per round
  tokens_per_s: float
  stop_reason: str                # "stop_token" | "max_new_tokens"
  text: Optional[str] = None

  def stats(self) -> dict:
    return {"rounds": self.rounds, "accepted_per_round": self.accepted_per_round, "tau": self.tau,
            "tokens_per_s": self.tokens_per_s, "prompt_tokens": self.prompt_tokens,
            "generated_tokens": len(self.token_ids), "stop_reason": self.stop_reason}


def _bucket(n: int, step: int) -> int:
  return max(step, int(math.ceil(n / step)) * step)


class Engine:
  """Runs a target (DeepseekV3) and optionally a DFlash drafter.

  target: DeepseekV3 module; drafter: DFlashDrafter module or None (then only mode "ar").
  """

  def __init__(self, target, target_cfg: ModelConfig, drafter=None, drafter_cfg: Optional[DFlashConfig] = None,
               *, cache_dtype=None):
    if (drafter is None) != (drafter_cfg is None):
      raise ValueError("Engine: pass both drafter and drafter_cfg, or neither")
    if drafter_cfg is not None:
      drafter_cfg.check_against(target_cfg)
    self.target_cfg = target_cfg
    self.drafter_cfg = drafter_cfg
    self._t_graph, self._t_params = nnx.split(target)
    if drafter is not None:
      self._d_graph, self._d_params = nnx.split(drafter)
    else:
      self._d_graph, self._d_params = None, None
    self.cache_dtype = cache_dtype or target.dtype
    self._compiled: dict = {}

  # ---- the compiled pieces --------------------------------------------------------------------
  def _merge(self, t_params, d_params):
    target = nnx.merge(self._t_graph, t_params)
    drafter = nnx.merge(self._d_graph, d_params) if self._d_graph is not None else None
    return target, drafter

  def _fn(self, kind: str, spec):
    from ddtree_jax.spec import step   # noqa: local import keeps engine import light

    if kind == "prefill":
      def f(t_params, d_params, state, tokens, prompt_len):
        target, drafter = self._merge(t_params, d_params)
        return step.prefill(target, drafter if spec.mode != "ar" else None, state, tokens, prompt_len, spec)
      return jax.jit(f, donate_argnums=(2,))
    def g(t_params, d_params, state):
      target, drafter = self._merge(t_params, d_params)
      if spec.mode == "ar":
        return step.ar_round(target, state, spec)
      return step.speculative_round(target, drafter, state, spec)
    return jax.jit(g, donate_argnums=(2,))

  def _compiled_fn(self, kind, spec, *args):
    key = (kind, spec, tuple((a.shape, a.dtype) for a in jax.tree_util.tree_leaves(args[2:])))
    if key not in self._compiled:
      self._compiled[key] = self._fn(kind, spec).lower(*args).compile()
    return self._compiled[key]

  def round_spec(self, mode: str, budget: int, sampling: SamplingParams, stop_ids: Sequence[int]):
    from ddtree_jax.spec.step import RoundSpec
    if mode not in MODES:
      raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    stops = tuple(sorted(set(int(s) for s in stop_ids)))
    if mode == "ar":
      return RoundSpec(mode="ar", sampling=sampling, stop_ids=stops)
    if self.drafter_cfg is None:
      raise ValueError(f"mode {mode!r} needs a drafter; this engine has none (use mode 'ar' or pass --drafter_dir)")
    d = self.drafter_cfg
    if mode == "dflash":
      budget, topk = d.block_size - 1, 1
    else:
      if budget < 1:
        raise ValueError(f"budget must be >= 1, got {budget}")
      topk = min(budget, self.target_cfg.vocab_size)
    return RoundSpec(mode=mode, budget=budget, topk=topk, block_size=d.block_size, mask_token_id=d.mask_token_id,
                     feature_layers=tuple(d.target_layer_ids), sampling=sampling, stop_ids=stops)

  def init_state(self, batch: int, capacity: int, out_width: int, max_rounds: int, seed: int) -> GenerationState:
    cfg = self.target_cfg
    cache = init_latent_cache(cfg.num_hidden_layers, batch, capacity, cfg.kv_lora_rank, cfg.qk_rope_head_dim,
                              self.cache_dtype)
    dcache = None
    if self.drafter_cfg is not None:
      from ddtree_jax.drafter_cache import init_drafter_cache
      dcache = init_drafter_cache(self.drafter_cfg, batch, capacity, self.cache_dtype)
    return GenerationState(
        cache=cache, drafter_cache=dcache, bonus=jnp.zeros((batch,), jnp.int32), key=jax.random.key(seed),
        out=jnp.zeros((batch, out_width), jnp.int32), out_len=jnp.zeros((batch,), jnp.int32),
        max_new=jnp.zeros((batch,), jnp.int32), done=jnp.zeros((batch,), bool),
        rounds=jnp.zeros((batch,), jnp.int32), per_round=jnp.zeros((batch, max_rounds), jnp.int32))

  # ---- the public entry point -----------------------------------------------------------------
  def generate(self, prompts: Sequence[Sequence[int]], *, mode: str = "ddtree", budget: int = 32,
               sampling: SamplingParams = SamplingParams(), max_new_tokens: int = 64, seed: int = 0,
               stop_ids: Optional[Sequence[int]] = None,
               stream: Optional[Callable[[int, list[int]], None]] = None) -> list[GenerationResult]:
    """Generates for a batch of token-id prompts (different lengths allowed).

    stream(i, new_ids) is called after each round with the tokens request i gained in that round.
    """
    cfg = self.target_cfg
    sampling = sampling.validate()
    if max_new_tokens < 1:
      raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if not prompts:
      raise ValueError("no prompts given")
    for i, p in enumerate(prompts):
      if len(p) == 0:
        raise ValueError(f"prompt {i} is empty")
      bad = [t for t in p if not 0 <= int(t) < cfg.vocab_size]
      if bad:
        raise ValueError(f"prompt {i}: token id {bad[0]} is outside the vocabulary [0, {cfg.vocab_size})")
      if len(p) + max_new_tokens > cfg.max_position_embeddings:
        raise ValueError(f"prompt {i}: {len(p)} prompt tokens + max_new_tokens {max_new_tokens} exceed the "
                         f"model's window max_position_embeddings={cfg.max_position_embeddings}")
    stops = cfg.stop_token_ids if stop_ids is None else tuple(stop_ids)
    spec = self.round_spec(mode, budget, sampling, stops)
    block = max(spec.block_size, 1)
    b = len(prompts)
    p_max = _bucket(max(len(p) for p in prompts), 16)
    capacity = _bucket(p_max + max_new_tokens + spec.budget + block + 1, 128)
    out_width = max_new_tokens + block
    tokens = np.zeros((b, p_max), np.int32)
    for i, p in enumerate(prompts):
      tokens[i, :len(p)] = np.asarray(p, np.int32)
    prompt_len = jnp.asarray([len(p) for p in prompts], jnp.int32)
    state = self.init_state(b, capacity, out_width, max_new_tokens + 1, seed)
    state = dataclasses.replace(state, max_new=jnp.full((b,), max_new_tokens, jnp.int32))
    tokens = jnp.asarray(tokens)
    # Compile both programs before the clock starts (the round takes a state of the same shapes).
    prefill = self._compiled_fn("prefill", spec, self._t_params, self._d_params, state, tokens, prompt_len)
    step = self._compiled_fn("round", spec, self._t_params, self._d_params, state)
    t0 = time.perf_counter()
    state = prefill(self._t_params, self._d_params, state, tokens, prompt_len)
    seen = np.zeros(b, np.int64)
    if stream is not None:
      seen = self._stream(state, seen, stream)
    while not bool(jnp.all(state.done)):
      state = step(self._t_params, self._d_params, state)
      if stream is not None:
        seen = self._stream(state, seen, stream)
    jax.block_until_ready(state.out)
    elapsed = time.perf_counter() - t0
    return self._results(state, prompts, elapsed, stops)

  @staticmethod
  def _stream(state, seen, stream):
    out, out_len = np.asarray(state.out), np.asarray(state.out_len)
    for i in range(len(seen)):
      if out_len[i] > seen[i]:
        stream(i, out[i, seen[i]:out_len[i]].tolist())
    return out_len.astype(np.int64)

  @staticmethod
  def _results(state, prompts, elapsed, stops):
    out, out_len = np.asarray(state.out), np.asarray(state.out_len)
    rounds, per_round = np.asarray(state.rounds), np.asarray(state.per_round)
    results = []
    for i, p in enumerate(prompts):
      ids = out[i, :out_len[i]].tolist()
      acc = per_round[i, :rounds[i]].tolist()
      # The first token comes from the prefill, not from a round.
      tau = (sum(acc) / len(acc)) if acc else 0.0
      reason = "stop_token" if ids and ids[-1] in stops else "max_new_tokens"
      results.append(GenerationResult(token_ids=ids, prompt_tokens=len(p), rounds=int(rounds[i]),
                                      accepted_per_round=acc, tau=tau,
                                      tokens_per_s=len(ids) / elapsed if elapsed > 0 else 0.0,
                                      stop_reason=reason))
    return results
