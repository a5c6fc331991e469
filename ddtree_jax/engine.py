"""The generation engine: prefill, the round loop, stopping, batching, streaming and statistics.

Every round is one computation (`spec/step.py`) over a donated `GenerationState`; a call of the compiled program
runs up to `rounds_per_call` of them in a device loop. The host only reads the `done` flags (and, when streaming or
checking a stop condition, the tokens) between calls.
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
from ddtree_jax.model.experts import kernel_k_chunk, use_kernel_layout
from ddtree_jax.sampling import SamplingParams
from ddtree_jax.spec.prefill import DEFAULT_CHUNK as DEFAULT_PREFILL_CHUNK, check_chunk, chunk_layout
from ddtree_jax.spec.state import GenerationState

MODES = ("ar", "dflash", "ddtree")
STOP_SLOTS = 8   # stop-id slots per request (more stop ids round up to a multiple of this)
# Rounds per compiled call when run() is not told (one with --budget=auto). On the H200 the embedded model's rounds
# are host-bound: the host spends ~1.3-1.6 ms a call (argument handling, XLA's graph launch) against ~0.3 ms (AR)
# to ~0.9 ms (DDTree N=32) of kernels. Tokens/s, 8 prompts x 128 tokens, K = 1 / 4 / 8 rounds a call: AR 575 /
# 1101 / 1509, DDTree N=8 1504 / 2294 / 2505, N=32 1657 / 2433 / 2710 (benchmarks/RESULTS.md, issue 6 13th round).
DEFAULT_ROUNDS_PER_CALL = 8

# Compiled programs keyed by (kind, RoundSpec, graphdefs, argument shapes/dtypes/shardings).
_COMPILED: dict = {}


def _jit(kind: str, spec, t_graph, d_graph, out_shardings=None):
  """jax.jit of one prefill chunk, the prefill's end or one round over (target params, drafter params,
  donated state, ...). out_shardings: the state's shardings on a mesh (the output state is laid out as
  the input)."""
  jit_kw = {} if out_shardings is None else {"out_shardings": out_shardings}
  from ddtree_jax.spec import prefill, step

  def models(t_params, d_params):
    target = nnx.merge(t_graph, t_params)
    drafter = nnx.merge(d_graph, d_params) if d_graph is not None and spec.mode != "ar" else None
    return target, drafter

  if kind == "prefill_chunk":
    def one_chunk(t_params, d_params, state, tokens, start, prompt_len):
      target, drafter = models(t_params, d_params)
      return prefill.prefill_chunk(target, drafter, state, tokens, start, prompt_len, spec)
    return jax.jit(one_chunk, donate_argnums=(2,), **jit_kw)
  if kind == "prefill_finish":
    def finish(t_params, d_params, state, prompt_len):
      del t_params, d_params
      return prefill.prefill_finish(state, prompt_len)
    return jax.jit(finish, donate_argnums=(2,), **jit_kw)

  def some_rounds(t_params, d_params, state):
    target, drafter = models(t_params, d_params)
    return step.rounds(target, drafter, state, spec)
  return jax.jit(some_rounds, donate_argnums=(2,), **jit_kw)


@dataclasses.dataclass
class GenerationResult:
  token_ids: list[int]
  prompt_tokens: int
  rounds: int
  accepted_per_round: list[int]   # tokens emitted by each round (the bonus included)
  tau: float                      # mean tokens per round
  tokens_per_s: float             # tokens / the batch's generation time (prefill + rounds; compilation excluded)
  stop_reason: str                # "stop_token" | "stop_string" | "max_new_tokens"
  text: Optional[str] = None
  logprobs: Optional[list[float]] = None   # the target's log-probability of each token (run(logprobs=True))
  prefill_s: float = 0.0          # the batch's prefill: time to its first tokens
  decode_tokens_per_s: float = 0.0   # the tokens after the first / the time after the prefill

  def stats(self) -> dict:
    return {"rounds": self.rounds, "accepted_per_round": self.accepted_per_round, "tau": self.tau,
            "tokens_per_s": self.tokens_per_s, "prefill_s": self.prefill_s,
            "decode_tokens_per_s": self.decode_tokens_per_s, "prompt_tokens": self.prompt_tokens,
            "generated_tokens": len(self.token_ids), "stop_reason": self.stop_reason}


# The distinct (target graphdef, drafter graphdef) pairs of the Engines made so far; a pair's index stands for it in
# the keys of _COMPILED (equal graphdefs, equal index).
_GRAPHS: list = []


def _graphs_id(t_graph, d_graph) -> int:
  for i, (t, d) in enumerate(_GRAPHS):
    if t == t_graph and d == d_graph:
      return i
  _GRAPHS.append((t_graph, d_graph))
  return len(_GRAPHS) - 1


def _signature(tree) -> tuple:
  """(shape, dtype, sharding) of every leaf: what a compiled program's arguments must match."""
  return tuple((a.shape, a.dtype, getattr(a, "sharding", None)) for a in jax.tree_util.tree_leaves(tree))


def _host(x) -> np.ndarray:
  """A (possibly multi-process, batch-sharded) array as a full host numpy array."""
  if getattr(x, "is_fully_addressable", True) or x.sharding.is_fully_replicated:
    return np.asarray(x)
  from jax.experimental import multihost_utils
  return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def _bucket(n: int, step: int) -> int:
  return max(step, int(math.ceil(n / step)) * step)


def _key_data(seed: int) -> np.ndarray:
  """jax.random.key(seed)'s data on the host: the engine's seed contract is jax.random.key of the Python int
  (which a jitted int32 argument would not reproduce for every int), and a host array can go to any mesh."""
  return np.asarray(jax.random.key_data(jax.random.key(seed)))


def check_requests(cfg: ModelConfig, prompts: Sequence[Sequence[int]], max_new_tokens, names=None) -> list[int]:
  """Raises ValueError unless every prompt can be generated from by a target of config cfg: not empty, ids in the
  vocabulary, prompt + its max_new_tokens (one for all, or one per prompt) within the model's window. names[i] names
  prompt i in the messages (default "prompt i"). Returns the max_new_tokens of each prompt. Engine.run checks its
  batch with it; a caller with many prompts can check them all before loading a model (ddtree-generate)."""
  name = (lambda i: names[i]) if names is not None else (lambda i: f"prompt {i}")
  if not prompts:
    raise ValueError("no prompts given")
  per_request = [max_new_tokens] * len(prompts) if np.ndim(max_new_tokens) == 0 else list(max_new_tokens)
  if len(per_request) != len(prompts):
    raise ValueError(f"max_new_tokens: {len(per_request)} values for {len(prompts)} prompts")
  for i, (p, m) in enumerate(zip(prompts, per_request)):
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1:
      raise ValueError(f"max_new_tokens must be an integer >= 1, got {m!r}"
                       + (f" for {name(i)}" if len(prompts) > 1 or names is not None else ""))
    if len(p) == 0:
      raise ValueError(f"{name(i)} is empty")
    bad = [t for t in p if not 0 <= int(t) < cfg.vocab_size]
    if bad:
      raise ValueError(f"{name(i)}: token id {bad[0]} is outside the vocabulary [0, {cfg.vocab_size})")
    if len(p) + m > cfg.max_position_embeddings:
      raise ValueError(f"{name(i)}: {len(p)} prompt tokens + max_new_tokens {m} exceed the "
                       f"model's window max_position_embeddings={cfg.max_position_embeddings}")
  return [int(m) for m in per_request]


@dataclasses.dataclass
class _HostProgress:
  """What the host's loop has done with each request's tokens so far (Engine._after_call)."""
  seen: np.ndarray                 # int64 [B]: tokens streamed
  checked: np.ndarray              # int64 [B]: tokens stop_when has seen
  kept: list                       # [B]: None, or the tokens a request stopped by stop_when keeps

  @classmethod
  def start(cls, batch: int) -> "_HostProgress":
    return cls(np.zeros(batch, np.int64), np.zeros(batch, np.int64), [None] * batch)


class Engine:
  """Runs a target (DeepseekV3) and optionally a DFlash drafter.

  target: DeepseekV3 module; drafter: DFlashDrafter module or None (then only mode "ar").
  """

  def __init__(self, target, target_cfg: ModelConfig, drafter=None, drafter_cfg: Optional[DFlashConfig] = None,
               *, cache_dtype=None, mesh=None, prefill_chunk: Optional[int] = DEFAULT_PREFILL_CHUNK,
               moe_layout: str = "auto"):
    """mesh: a ("data", "model") jax.sharding.Mesh (ddtree_jax.sharding.make_mesh) to run on; parameters
    not already placed are moved onto it by the rules of sharding.py. None: one device.
    prefill_chunk: prompt tokens per prefill forward (spec/prefill.py); 0 or None: the whole prompt at once.
    moe_layout: the INT4 experts' layout ("auto": k-chunked for the GPU kernels on a GPU backend, else as stored;
    model/experts.py kernel_k_chunk). Re-laying them changes `target`'s expert arrays in place, once."""
    self.prefill_chunk = check_chunk(prefill_chunk)
    if (drafter is None) != (drafter_cfg is None):
      raise ValueError("Engine: pass both drafter and drafter_cfg, or neither")
    if drafter_cfg is not None:
      drafter_cfg.check_against(target_cfg)
    self.moe_k_chunk = kernel_k_chunk(target_cfg, moe_layout)
    if self.moe_k_chunk:                                   # after every check: a refused Engine changes nothing
      use_kernel_layout(target, self.moe_k_chunk)
    self.target_cfg = target_cfg
    self.drafter_cfg = drafter_cfg
    self.mesh = mesh
    if mesh is not None:
      from ddtree_jax import sharding
      sharding.with_mesh(target, mesh)
    self._t_graph, self._t_params = nnx.split(target)
    if drafter is not None:
      self._d_graph, self._d_params = nnx.split(drafter)
    else:
      self._d_graph, self._d_params = None, None
    if mesh is not None:
      self._t_params = sharding.shard_module_state(self._t_params, sharding.target_rule(mesh, target_cfg))
      if drafter is not None:
        self._d_params = sharding.shard_module_state(self._d_params, sharding.drafter_rule(mesh, drafter_cfg))
    self.cache_dtype = cache_dtype or target.dtype
    # What the compiled programs' key needs of the models, worked out once: hashing the graphdefs and
    # flattening the nnx parameter states took 2.1 ms per program lookup (three per generate) on the CPU
    # container with the embedded model, 0.08 ms this way (benchmarks/RESULTS.md, issue 6 thirteenth round).
    self._graphs_id = _graphs_id(self._t_graph, self._d_graph)
    self._init_programs = {}   # init_state's compiled programs, by shape
    self._mark_done_programs = {}   # _mark_done's, by the sharding of the done flags
    self._params_signature = _signature((self._t_params, self._d_params))

  # ---- the compiled pieces --------------------------------------------------------------------
  def _compiled_fn(self, kind, spec, *args):
    """The compiled prefill chunk, prefill end or round over (target params, drafter params, state, ...).
    Programs are shared by every Engine whose models have the same structure (graphdef), so new weights of the
    same shapes do not recompile."""
    params = self._params_signature if args[0] is self._t_params and args[1] is self._d_params else \
        _signature(args[:2])
    key = (kind, spec, self._graphs_id, params, _signature(args[2:]))
    if key not in _COMPILED:
      out = jax.tree_util.tree_map(lambda a: a.sharding, args[2]) if self.mesh is not None else None
      _COMPILED[key] = _jit(kind, spec, self._t_graph, self._d_graph, out).lower(*args).compile()
    return _COMPILED[key]

  def round_spec(self, mode: str, budget: int, sampling: SamplingParams):
    from ddtree_jax.spec.step import RoundSpec
    if mode not in MODES:
      raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if mode == "ar":
      return RoundSpec(mode="ar", sampling=sampling)
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
                     feature_layers=tuple(d.target_layer_ids), sampling=sampling)

  def init_state(self, batch: int, capacity: int, out_width: int, max_rounds: int, seed: int,
                 num_stop_ids: int = STOP_SLOTS, *, max_new=0, stop_ids: Optional[np.ndarray] = None,
                 expected_width: int = 0, logprobs: bool = False) -> GenerationState:
    """The empty state of a generation of `batch` requests (caches of `capacity` slots, `out_width` output slots,
    `max_rounds` per-round counts): max_new_tokens `max_new` (one for all or [batch]), stop tokens `stop_ids`
    [batch, num_stop_ids] (padded with -1; None: none), an [batch, expected_width] expected-tokens table for
    --budget=auto (0: none), and with `logprobs` an [batch, out_width] table of the tokens' log-probabilities.

    One compiled program per shape, kept on the Engine: built eagerly it was ~30 small dispatches, ~22 ms of
    every generate on the H200 (benchmarks/RESULTS.md, issue 6 fourteenth round). On a mesh the program
    allocates the state in place, shard by shard (no full copy on one device)."""
    shape = (batch, capacity, out_width, max_rounds, num_stop_ids, expected_width, logprobs)
    program = self._init_programs.get(shape)
    if program is None:
      def build(key_data, max_new_arr, stop_arr):
        state = self._init_state(batch, capacity, out_width, max_rounds, jax.random.wrap_key_data(key_data),
                                 num_stop_ids)
        return dataclasses.replace(state, max_new=max_new_arr, stop_ids=stop_arr,
                                   expected=jnp.zeros((batch, expected_width)) if expected_width else None,
                                   logprobs=jnp.zeros((batch, out_width), jnp.float32) if logprobs else None)
      shardings = None
      if self.mesh is not None:
        from ddtree_jax import sharding
        example = (_key_data(0), np.zeros(batch, np.int32), np.zeros((batch, num_stop_ids), np.int32))
        shardings = sharding.state_shardings(jax.eval_shape(build, *example), self.mesh, self.drafter_cfg)
      program = self._init_programs[shape] = jax.jit(build, out_shardings=shardings)
    if stop_ids is None:
      stop_ids = np.full((batch, num_stop_ids), -1, np.int32)
    if np.shape(stop_ids) != (batch, num_stop_ids):
      raise ValueError(f"init_state: stop_ids has shape {np.shape(stop_ids)}, expected {(batch, num_stop_ids)}")
    if np.ndim(max_new) not in (0, 1) or np.size(max_new) not in (1, batch):
      raise ValueError(f"init_state: max_new has shape {np.shape(max_new)}, expected () or {(batch,)}")
    max_new = np.broadcast_to(np.asarray(max_new, np.int32), (batch,))
    return program(_key_data(seed), max_new, np.asarray(stop_ids, np.int32))

  def _init_state(self, batch, capacity, out_width, max_rounds, seed, num_stop_ids) -> GenerationState:
    """The empty state's arrays (traced inside init_state's program). seed: an int or a PRNG key."""
    cfg = self.target_cfg
    cache = init_latent_cache(cfg.num_hidden_layers, batch, capacity, cfg.kv_lora_rank, cfg.qk_rope_head_dim,
                              self.cache_dtype)
    dcache = None
    if self.drafter_cfg is not None:
      from ddtree_jax.drafter_cache import init_drafter_cache
      dcache = init_drafter_cache(self.drafter_cfg, batch, capacity, self.cache_dtype)
    is_key = isinstance(seed, jax.Array) and jax.dtypes.issubdtype(seed.dtype, jax.dtypes.prng_key)
    state = GenerationState(
        cache=cache, drafter_cache=dcache, bonus=jnp.zeros((batch,), jnp.int32),
        key=seed if is_key else jax.random.key(seed),
        out=jnp.zeros((batch, out_width), jnp.int32), out_len=jnp.zeros((batch,), jnp.int32),
        max_new=jnp.zeros((batch,), jnp.int32), done=jnp.zeros((batch,), bool),
        rounds=jnp.zeros((batch,), jnp.int32), per_round=jnp.zeros((batch, max_rounds), jnp.int32),
        stop_ids=jnp.full((batch, num_stop_ids), -1, jnp.int32))
    return state

  def _place(self, tree):
    """On a mesh: a GenerationState by sharding.state_shardings, [B, ...] inputs by batch."""
    if self.mesh is None:
      return tree
    from ddtree_jax import sharding
    if isinstance(tree, GenerationState):
      shardings = sharding.state_shardings(tree, self.mesh, self.drafter_cfg)
      return jax.tree_util.tree_map(sharding.put_global, tree, shardings)
    spec = (sharding.batch_axis(self.mesh, tree.shape[0]),) + (None,) * (tree.ndim - 1)
    return sharding.put_global(tree, jax.sharding.NamedSharding(self.mesh, jax.sharding.PartitionSpec(*spec)))

  # ---- the public entry point -----------------------------------------------------------------
  def generate(self, prompts: Sequence[Sequence[int]], **kwargs) -> list[GenerationResult]:
    """Generates for a batch of token-id prompts (different lengths allowed). See `run`."""
    return self.run(prompts, **kwargs)[0]

  def run(self, prompts: Sequence[Sequence[int]], *, mode: str = "ddtree", budget: int | str = 32,
          sampling: SamplingParams = SamplingParams(), max_new_tokens: int | Sequence[int] = 64, seed: int = 0,
          stop_ids: Optional[Sequence[int]] = None,
          stream: Optional[Callable[[int, list[int]], None]] = None,
          rounds_per_call: Optional[int] = None,
          stop_when: Optional[Callable[[int, list[int]], Optional[int]]] = None,
          logprobs: bool = False) -> tuple[list[GenerationResult], GenerationState]:
    """Generates and also returns the final state (caches included).

    budget: DDTree nodes N, or "auto" (spec/auto_budget.py: the budget that maximises expected tokens/s
    among precompiled candidates, from the drafter's expected acceptance and measured round costs;
    `self.auto_options` passes AutoBudget keyword arguments, `self.last_auto` holds the decisions).

    rounds_per_call: rounds each compiled call runs on the device before the host reads the done flags
    (spec/step.py rounds; the tokens are the same for any value). Above 1 the host's fixed cost per call
    (argument handling, XLA's graph launch) is shared by that many rounds. None: DEFAULT_ROUNDS_PER_CALL, or 1
    with budget "auto", which chooses each round's program from the previous round (more is refused).

    max_new_tokens: one limit for every request, or one per request (a request that reaches its own is done
    while the others go on).

    stream(i, new_ids) is called after each call with the tokens request i gained in its rounds.

    stop_when(i, ids) -> None or n: a stop condition the host checks after each call (and after the prefill) on
    request i's tokens so far, e.g. stop strings (stop_strings.StopStrings.tokens_to_keep). n: the request ends
    with its first n tokens (stop_reason "stop_string"); it is marked done on the device, the tokens the call ran
    past it are dropped, and its rounds, accepted_per_round and tau count only the rounds and tokens up to its n-th
    token (the returned state keeps what the device ran: tokens and cache entries past the stop included). Once a
    request has stopped it is not asked again.
    Several processes (jax.distributed): give stream and stop_when on every process or on none (the host's read of
    the tokens is a collective when the batch is split over processes); stop_when must decide the same on each.

    logprobs: also return each token's log-probability under the target (sampling.token_logprobs: the model's
    distribution before temperature / top-k / top-p), taken from the forward that chose the token (prefill, AR
    step or tree verify). Costs a log-sum-exp over the vocabulary for the emitted positions of each round.
    """
    cfg = self.target_cfg
    sampling = sampling.validate()
    per_request = check_requests(cfg, prompts, max_new_tokens)
    max_new_tokens = max(per_request)
    if rounds_per_call is None:
      rounds_per_call = 1 if budget == "auto" else DEFAULT_ROUNDS_PER_CALL
    if not isinstance(rounds_per_call, int) or rounds_per_call < 1:
      raise ValueError(f"rounds_per_call must be an integer >= 1, got {rounds_per_call!r}")
    if rounds_per_call > 1 and budget == "auto":
      raise ValueError(f"rounds_per_call={rounds_per_call}: budget 'auto' picks every round's program from the "
                       "previous round, so it runs one round per call (use rounds_per_call=1)")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**32:
      raise ValueError(f"seed must be an integer in [0, 2**32), got {seed!r} (jax.random.key keeps its low 32 "
                       "bits, so a larger seed would silently repeat a smaller one's samples)")
    stops = tuple(sorted(set(int(s) for s in (cfg.stop_token_ids if stop_ids is None else stop_ids))))
    if any(not 0 <= s < cfg.vocab_size for s in stops):
      raise ValueError(f"stop_ids: {stops} has an id outside the vocabulary [0, {cfg.vocab_size})")
    auto = None
    if budget == "auto":
      from ddtree_jax.spec.auto_budget import AutoBudget
      opts = dict(getattr(self, "auto_options", None) or {})
      opts.setdefault("memory", self.__dict__.setdefault("_auto_memory", {}).setdefault(len(prompts), {}))
      auto = AutoBudget(**opts) if mode == "ddtree" else None
      budget = auto.max_budget if auto is not None else 1
    elif not isinstance(budget, int):
      raise ValueError(f"budget must be an integer >= 1 or 'auto', got {budget!r}")
    spec = dataclasses.replace(self.round_spec(mode, budget, sampling), rounds_per_call=rounds_per_call)
    if auto is not None:
      spec = dataclasses.replace(spec, auto_budgets=auto.candidates)
    block = max(spec.block_size, 1)
    b = len(prompts)
    p_max = _bucket(max(len(p) for p in prompts), 16)
    chunk, n_chunks = chunk_layout(p_max, self.prefill_chunk)   # the last chunk is padded
    # The cache holds the padded chunks and the longest generation (+ one round's block).
    capacity = _bucket(max(n_chunks * chunk, p_max + max_new_tokens + spec.budget + block + 1), 128)
    # Buffers are bucketed so that nearby max_new_tokens values share compiled programs.
    out_width = _bucket(max_new_tokens, 64) + block
    num_stops = _bucket(len(stops), STOP_SLOTS)
    stop_arr = np.full((b, num_stops), -1, np.int32)
    stop_arr[:, :len(stops)] = stops
    tokens = np.zeros((b, n_chunks * chunk), np.int32)
    for i, p in enumerate(prompts):
      tokens[i, :len(p)] = np.asarray(p, np.int32)
    from ddtree_jax import plan
    plan.check_engine(self, batch=b, capacity=capacity, prompt_tokens=p_max, budget=spec.budget,
                      prefill_chunk=chunk)
    prompt_len = self._place(np.asarray([len(p) for p in prompts], np.int32))
    state = self.init_state(b, capacity, out_width, _bucket(max_new_tokens + 1, 64), seed, num_stops,
                            max_new=np.asarray(per_request, np.int32), stop_ids=stop_arr,
                            expected_width=0 if auto is None else len(auto.candidates), logprobs=logprobs)
    chunks = [(self._place(tokens[:, i * chunk:(i + 1) * chunk]), self._place(np.full((b,), i * chunk, np.int32)))
              for i in range(n_chunks)]
    # Compile every program before the clock starts (the round takes a state of the same shapes).
    pspec = spec.prefill_spec()
    prefill = self._compiled_fn("prefill_chunk", pspec, self._t_params, self._d_params, state, *chunks[0], prompt_len)
    finish = self._compiled_fn("prefill_finish", pspec, self._t_params, self._d_params, state, prompt_len)
    step = self._compiled_fn("round", spec, self._t_params, self._d_params, state)
    if auto is not None:   # one program per candidate budget, all compiled before the clock starts
      steps = {n: self._compiled_fn("round", dataclasses.replace(spec, budget=n, topk=min(n, cfg.vocab_size)),
                                    self._t_params, self._d_params, state) for n in auto.candidates}
    t0 = time.perf_counter()
    for chunk_tokens, start in chunks:
      state = prefill(self._t_params, self._d_params, state, chunk_tokens, start, prompt_len)
    state = finish(self._t_params, self._d_params, state, prompt_len)
    # The host's next step (a read of the tokens or of `done`) waits for the prefill anyway: no extra sync.
    jax.block_until_ready(state.done)
    prefill_s = time.perf_counter() - t0
    progress = _HostProgress.start(b)
    state = self._after_call(state, progress, stream, stop_when)
    all_done = _host(state.done).all()
    while not all_done:
      if auto is not None:
        step = steps[auto.pick(state)]
      state = step(self._t_params, self._d_params, state)
      state = self._after_call(state, progress, stream, stop_when)
      all_done = _host(state.done).all()
    jax.block_until_ready(state.out)
    elapsed = time.perf_counter() - t0
    if auto is not None:
      auto.finish()
      self.last_auto = auto.summary()
    return self._results(state, prompts, elapsed, prefill_s, stops, progress.kept), state

  def _after_call(self, state, progress: _HostProgress, stream, stop_when):
    """After the prefill or a call of rounds: asks stop_when about the requests with new tokens (marking those it
    ends done on the device), then streams the new tokens (up to what a stopped request keeps). Reads nothing from
    the device when there is neither."""
    if stream is None and stop_when is None:
      return state
    out, out_len = _host(state.out), _host(state.out_len)
    if stop_when is not None:
      newly = np.zeros(len(progress.kept), bool)
      for i in np.flatnonzero(out_len > progress.checked):
        if progress.kept[i] is None:
          n = stop_when(int(i), out[i, :out_len[i]].tolist())
          if n is not None and (isinstance(n, bool) or not isinstance(n, (int, np.integer))
                                or not 1 <= n <= out_len[i]):
            raise ValueError(f"stop_when({i}, ids) returned {n!r}; expected None or a token count in "
                             f"[1, {out_len[i]}]")
          progress.kept[i], newly[i] = n, n is not None
      progress.checked = np.maximum(progress.checked, out_len)
      if newly.any():
        state = self._mark_done(state, newly)
    for i in range(len(progress.kept)):
      end = out_len[i] if progress.kept[i] is None else min(int(out_len[i]), progress.kept[i])
      if stream is not None and end > progress.seen[i]:
        stream(i, out[i, progress.seen[i]:end].tolist())
      progress.seen[i] = max(progress.seen[i], end)
    return state

  def _mark_done(self, state, newly):
    """state with done set for the requests where newly [B] is True (same shardings, so the compiled rounds
    still take it)."""
    done = state.done
    fn = self._mark_done_programs.get(done.sharding)
    if fn is None:
      fn = self._mark_done_programs[done.sharding] = jax.jit(jnp.logical_or, out_shardings=done.sharding)
    return dataclasses.replace(state, done=fn(done, self._place(newly)))

  @staticmethod
  def _results(state, prompts, elapsed, prefill_s, stops, kept):
    out, out_len = _host(state.out), _host(state.out_len)
    rounds, per_round = _host(state.rounds), _host(state.per_round)
    logprobs = None if state.logprobs is None else _host(state.logprobs)
    results = []
    for i, p in enumerate(prompts):
      ids = out[i, :out_len[i]].tolist()
      acc = per_round[i, :rounds[i]].tolist()
      if kept[i] is not None:
        ids = ids[:kept[i]]
        # The first token comes from the prefill, each round's from acc: keep the rounds up to the kept tokens,
        # the last of them counting only its tokens up to the stop.
        acc = acc[:int(np.searchsorted(np.cumsum([1] + acc), kept[i]))]
        if acc:
          acc[-1] -= 1 + sum(acc) - kept[i]
        reason = "stop_string"
      else:
        reason = "stop_token" if ids and ids[-1] in stops else "max_new_tokens"
      tau = (sum(acc) / len(acc)) if acc else 0.0
      results.append(GenerationResult(token_ids=ids, prompt_tokens=len(p), rounds=len(acc),
                                      accepted_per_round=acc, tau=tau,
                                      tokens_per_s=len(ids) / elapsed if elapsed > 0 else 0.0,
                                      stop_reason=reason,
                                      logprobs=None if logprobs is None else logprobs[i, :len(ids)].tolist(),
                                      prefill_s=prefill_s,
                                      decode_tokens_per_s=(len(ids) - 1) / (elapsed - prefill_s)
                                      if elapsed > prefill_s else 0.0))
    return results
