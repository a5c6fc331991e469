"""DFlash chain and DDTree rounds reproduce AR exactly at T=0 (issue 4), with a useless drafter
(random DFlash weights, tau near 1) and with an oracle drafter (the target's own greedy
continuation, full blocks), for ragged batches, stop tokens inside accepted paths and max_new_tokens."""
import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from configs.tiny import tiny, tiny_drafter
from ddtree_jax.engine import Engine
from ddtree_jax.model.deepseek import DeepseekV3
from ddtree_jax.model.dflash import DFlashDrafter
from ddtree_jax.sampling import SamplingParams
from ddtree_jax.spec.oracle import OracleDrafter
from ddtree_jax.stop_strings import StopStrings

MAX_NEW = 24
SEEDS = (0, 1, 2)
# Compiled programs are shared by every Engine of the same model structure and shapes (engine._COMPILED), so
# the tests below use one batch size (BATCH) and the budgets of the first test (DDTREE_BUDGETS) where the
# budget does not matter to what they check: each new batch size or budget is a set of new compilations.
BATCH = 3
DDTREE_BUDGETS = (4, 24)


def random_prompts(rng, cfg, n):
  return [rng.integers(2, cfg.vocab_size - 1, size=int(rng.integers(2, 14))).tolist() for _ in range(n)]


@pytest.fixture(scope="module")
def cfgs():
  cfg = tiny(stop_token_ids=())
  return cfg, tiny_drafter(cfg, block_size=8)


def engines(cfgs, seed):
  cfg, dcfg = cfgs
  target = DeepseekV3(cfg, dtype=jnp.float32, rngs=nnx.Rngs(seed))
  dflash = Engine(target, cfg, DFlashDrafter(dcfg, dtype=jnp.float32, rngs=nnx.Rngs(seed + 100)), dcfg)
  oracle = Engine(target, cfg, OracleDrafter(dcfg.block_size), dcfg)
  return dflash, oracle


@pytest.mark.parametrize("seed", SEEDS)
def test_greedy_lossless_random_weights(cfgs, seed):
  cfg, _ = cfgs
  dflash, oracle = engines(cfgs, seed)
  rng = np.random.default_rng(seed)
  prompts = random_prompts(rng, cfg, BATCH)      # batch > 1, ragged lengths
  assert len({len(p) for p in prompts}) > 1
  ar = [r.token_ids for r in dflash.generate(prompts, mode="ar", max_new_tokens=MAX_NEW)]
  assert all(len(t) == MAX_NEW for t in ar)
  for eng, name in ((dflash, "dflash-drafter"), (oracle, "oracle")):
    for mode, budget in (("dflash", 1),) + tuple(("ddtree", n) for n in DDTREE_BUDGETS):
      res = eng.generate(prompts, mode=mode, budget=budget, max_new_tokens=MAX_NEW)
      assert [r.token_ids for r in res] == ar, (name, mode, budget)
      if name == "oracle":
        # Every draft is right: each round emits the whole chain the budget allows, plus the bonus
        # (the last round may be cut by max_new).
        full = min(7 if mode == "dflash" else budget, 7) + 1
        for r in res:
          assert all(a == full for a in r.accepted_per_round[:-1]), (mode, budget, r.accepted_per_round)
  # Batch 1 gives the same tokens as inside the batch.
  single = dflash.generate(prompts[1:2], mode="ddtree", budget=16, max_new_tokens=MAX_NEW)
  assert single[0].token_ids == ar[1]


def test_stop_token_inside_accepted_path(cfgs):
  cfg, _ = cfgs
  dflash, oracle = engines(cfgs, 0)
  prompts = random_prompts(np.random.default_rng(7), cfg, BATCH)
  ar_full = [r.token_ids for r in dflash.generate(prompts, mode="ar", max_new_tokens=MAX_NEW)]
  stop = ar_full[0][5]           # a token that the greedy output reaches mid-block
  expect = []
  for toks in ar_full:
    cut = toks.index(stop) + 1 if stop in toks else len(toks)
    expect.append(toks[:cut])
  for eng in (dflash, oracle):
    for mode, budget in (("ar", 1), ("dflash", 1), ("ddtree", DDTREE_BUDGETS[-1])):
      res = eng.generate(prompts, mode=mode, budget=budget, max_new_tokens=MAX_NEW, stop_ids=[stop])
      assert [r.token_ids for r in res] == expect, mode
      assert res[0].stop_reason == "stop_token"


def letters(ids):
  """A stand-in tokenizer's decode for stop strings: token t is one letter."""
  return "".join(chr(97 + t % 26) for t in ids)


def test_stop_strings_cut_at_the_token_that_completes_them(cfgs):
  cfg, _ = cfgs
  dflash, oracle = engines(cfgs, 0)
  prompts = random_prompts(np.random.default_rng(7), cfg, BATCH)
  ar_full = [r.token_ids for r in dflash.generate(prompts, mode="ar", max_new_tokens=MAX_NEW)]
  # A stop string that request 0 completes mid-output (rounds of several tokens run past it within a call), and
  # one that the prefill's first token already completes.
  for stop in (letters(ar_full[0][9:12]), letters(ar_full[0][:1])):
    expect = []
    for toks in ar_full:
      n = next((n for n in range(1, len(toks) + 1) if stop in letters(toks[:n])), len(toks))
      expect.append(toks[:n])
    for eng in (dflash, oracle):
      for mode, budget in (("ar", 1), ("dflash", 1), ("ddtree", DDTREE_BUDGETS[-1])):
        streamed = {i: [] for i in range(BATCH)}
        res = eng.generate(prompts, mode=mode, budget=budget, max_new_tokens=MAX_NEW,
                           stop_when=StopStrings(letters, [[stop]] * BATCH).tokens_to_keep,
                           stream=lambda i, ids: streamed[i].extend(ids))
        assert [r.token_ids for r in res] == expect, (stop, mode)
        assert [streamed[i] for i in range(BATCH)] == expect
        for r, full in zip(res, ar_full):
          assert r.stop_reason == ("stop_string" if stop in letters(full) else "max_new_tokens")
          # rounds, accepted_per_round and tau count the rounds and tokens up to the kept tokens
          acc = r.accepted_per_round
          assert r.rounds == len(acc) and 1 + sum(acc) == len(r.token_ids) and all(a >= 1 for a in acc)
      assert res[0].stop_reason == "stop_string"
  # A stopped request is marked done on the device: stopping every one after the prefill runs no round at all.
  res, state = oracle.run(prompts, mode="ddtree", budget=DDTREE_BUDGETS[-1], max_new_tokens=MAX_NEW,
                          stop_when=lambda i, ids: 1)
  assert [r.token_ids for r in res] == [t[:1] for t in ar_full] and not np.asarray(state.rounds).any()


@pytest.mark.parametrize("max_new", [1, 2, 9])
def test_max_new_tokens_exact(cfgs, max_new):
  cfg, _ = cfgs
  _, oracle = engines(cfgs, 0)
  prompts = random_prompts(np.random.default_rng(3), cfg, BATCH)
  ar = [r.token_ids for r in oracle.generate(prompts, mode="ar", max_new_tokens=max_new)]
  # The oracle's rounds emit 8 tokens (a full block): 9 = the prefill's token + one round, 2 cuts a round.
  res = oracle.generate(prompts, mode="ddtree", budget=DDTREE_BUDGETS[-1], max_new_tokens=max_new)
  assert [r.token_ids for r in res] == ar and all(len(t) == max_new for t in ar)


def test_max_new_tokens_per_request(cfgs):
  cfg, _ = cfgs
  dflash, oracle = engines(cfgs, 0)
  prompts = random_prompts(np.random.default_rng(3), cfg, BATCH)
  ar = [r.token_ids for r in oracle.generate(prompts, mode="ar", max_new_tokens=MAX_NEW)]
  limits = [1, 9, MAX_NEW - 3]           # the prefill's token only, one full oracle round, a cut round
  for eng, mode in ((oracle, "ddtree"), (dflash, "dflash"), (dflash, "ar")):
    res = eng.generate(prompts, mode=mode, budget=DDTREE_BUDGETS[-1], max_new_tokens=limits)
    assert [r.token_ids for r in res] == [t[:m] for t, m in zip(ar, limits)], mode
    assert all(r.stop_reason == "max_new_tokens" for r in res)
  with pytest.raises(ValueError, match="max_new_tokens: 2 values for 3 prompts"):
    oracle.generate(prompts, mode="ar", max_new_tokens=[4, 4])
  with pytest.raises(ValueError, match="max_new_tokens must be an integer >= 1, got 0 for prompt 1"):
    oracle.generate(prompts, mode="ar", max_new_tokens=[4, 0, 4])


def teacher_forced_logprobs(target, cfg, prompts, outputs):
  """log_softmax of the target's logits over each prompt + output in one causal forward (no cache, no rounds):
  [log p(out[j] | prompt, out[:j])] per request."""
  from ddtree_jax.cache import init_latent_cache
  seqs = [list(p) + list(o) for p, o in zip(prompts, outputs)]
  n = max(map(len, seqs))
  tokens = jnp.asarray([s + [0] * (n - len(s)) for s in seqs], jnp.int32)     # right-padded: causal, so harmless
  cache = init_latent_cache(cfg.num_hidden_layers, len(seqs), n, cfg.kv_lora_rank, cfg.qk_rope_head_dim, jnp.float32)
  mask = jnp.broadcast_to(jnp.tril(jnp.ones((n, n), bool)), (len(seqs), n, n))
  logits = nnx.jit(lambda m, t, c, k: m(t, jnp.broadcast_to(jnp.arange(n), t.shape), c, k).logits)(
      target, tokens, cache, mask)
  logp = np.asarray(jax.nn.log_softmax(logits, axis=-1))
  return [[logp[i, len(p) - 1 + j, t] for j, t in enumerate(o)] for i, (p, o) in enumerate(zip(prompts, outputs))]


def test_logprobs_are_the_targets_own(cfgs):
  cfg, _ = cfgs
  _, oracle = engines(cfgs, 2)      # the oracle drafter: long accepted paths, so every path position is read
  prompts = random_prompts(np.random.default_rng(11), cfg, BATCH)
  ar = oracle.generate(prompts, mode="ar", max_new_tokens=MAX_NEW, logprobs=True)
  want = teacher_forced_logprobs(dflash_target(oracle), cfg, prompts, [r.token_ids for r in ar])
  for r, w in zip(ar, want):
    np.testing.assert_allclose(r.logprobs, w, atol=1e-4)
  assert np.std(np.concatenate(want)) > 1e-3                       # not all alike
  for mode, budget in (("dflash", 1), ("ddtree", DDTREE_BUDGETS[-1])):   # the verify forward gives the same numbers
    res = oracle.generate(prompts, mode=mode, budget=budget, max_new_tokens=MAX_NEW, logprobs=True)
    assert [r.token_ids for r in res] == [r.token_ids for r in ar]
    assert max(max(r.accepted_per_round) for r in res) > 2
    for r, a in zip(res, ar):
      np.testing.assert_allclose(r.logprobs, a.logprobs, atol=1e-5)
  # Sampled (T = 1, top-p 0.5): the log-probabilities are the model's, not the filtered distribution's.
  sampled = oracle.generate(prompts, mode="ddtree", budget=DDTREE_BUDGETS[-1], max_new_tokens=MAX_NEW, seed=3,
                            sampling=SamplingParams(1.0, 0.5), logprobs=True)
  want = teacher_forced_logprobs(dflash_target(oracle), cfg, prompts, [r.token_ids for r in sampled])
  for r, w in zip(sampled, want):
    np.testing.assert_allclose(r.logprobs, w, atol=1e-4)
  assert oracle.generate(prompts, mode="ar", max_new_tokens=MAX_NEW)[0].logprobs is None


def test_cache_after_ddtree_equals_ar_cache(cfgs):
  """After the same accepted tokens, the committed target cache is what AR builds."""
  cfg, _ = cfgs
  dflash, oracle = engines(cfgs, 1)
  prompts = random_prompts(np.random.default_rng(11), cfg, BATCH)
  _, ar_state = oracle.run(prompts, mode="ar", max_new_tokens=MAX_NEW)
  for eng in (dflash, oracle):
    res, st = eng.run(prompts, mode="ddtree", budget=DDTREE_BUDGETS[-1], max_new_tokens=MAX_NEW)
    n = np.minimum(np.asarray(st.cache.lengths), np.asarray(ar_state.cache.lengths))
    assert n.min() >= min(len(p) for p in prompts) + MAX_NEW - 8
    for layer in range(cfg.num_hidden_layers):
      for a, b in ((st.cache.ckv[layer], ar_state.cache.ckv[layer]), (st.cache.kpe[layer], ar_state.cache.kpe[layer])):
        for i in range(len(prompts)):
          np.testing.assert_allclose(np.asarray(a[i, :n[i]]), np.asarray(b[i, :n[i]]), atol=2e-5, rtol=1e-4)


def test_several_rounds_per_call_give_what_one_round_per_call_gives(cfgs):
  """rounds_per_call=3 (a device loop of rounds, stopping once all are done) changes no token, round count,
  acceptance or stop reason, with a stop token and ragged lengths, nor any sampled token at T = 1; the stream
  delivers the same tokens in fewer, larger pieces. Bad values are refused."""
  cfg, _ = cfgs
  dflash, _ = engines(cfgs, 2)
  prompts = random_prompts(np.random.default_rng(5), cfg, BATCH)
  stop = dflash.generate(prompts, mode="ar", max_new_tokens=MAX_NEW)[1].token_ids[4]

  def run(mode, k):
    pieces = [[] for _ in prompts]
    res = dflash.generate(prompts, mode=mode, budget=DDTREE_BUDGETS[-1], max_new_tokens=MAX_NEW, stop_ids=[stop],
                          stream=lambda i, ids: pieces[i].append(ids), rounds_per_call=k)
    return [(r.token_ids, r.rounds, r.accepted_per_round, r.stop_reason) for r in res], pieces

  for mode in ("ar", "ddtree"):
    (one, one_pieces), (three, three_pieces) = run(mode, 1), run(mode, 3)
    assert three == one, mode
    assert any(r[3] == "stop_token" for r in one) and len({len(r[0]) for r in one}) > 1
    assert [sum(p, []) for p in three_pieces] == [sum(p, []) for p in one_pieces]
    assert sum(map(len, three_pieces)) < sum(map(len, one_pieces))
  sampled = [[r.token_ids for r in dflash.generate(prompts, mode="ddtree", budget=DDTREE_BUDGETS[-1], seed=4,
                                                   sampling=SamplingParams(1.0), max_new_tokens=MAX_NEW,
                                                   rounds_per_call=k)] for k in (1, 3)]
  assert sampled[0] == sampled[1]                   # T = 1: the same PRNG splits, round by round
  for bad in (0, -1, 1.5):
    with pytest.raises(ValueError, match="rounds_per_call"):
      dflash.generate(prompts, max_new_tokens=4, rounds_per_call=bad)
  with pytest.raises(ValueError, match="rounds_per_call=2: budget 'auto'"):
    dflash.generate(prompts, budget="auto", max_new_tokens=4, rounds_per_call=2)


def test_compiled_round_has_no_host_transfer(cfgs):
  cfg, dcfg = cfgs
  dflash, _ = engines(cfgs, 0)
  for mode, sampling in (("ddtree", SamplingParams()), ("ddtree", SamplingParams(1.0, 0.9, 5)), ("ar", SamplingParams())):
    spec = dflash.round_spec(mode, DDTREE_BUDGETS[-1], sampling)
    # The shapes of generate(BATCH prompts, mode="ddtree", max_new_tokens=MAX_NEW) (capacity 128, out width
    # 64 + block, 64 rounds): the greedy DDTree program is one the tests above ran (not compiled again).
    state = dflash.init_state(BATCH, 128, 64 + dcfg.block_size, 64, 0)
    hlo = dflash._compiled_fn("round", spec, dflash._t_params, dflash._d_params, state).as_text()
    for marker in ("callback", "outfeed", "infeed", "send(", "recv(", "host_compute", "SendToHost", "RecvFromHost"):
      assert marker not in hlo, (mode, marker)
    assert "while" in hlo or mode == "ar"     # the tree build and the walk are device loops


def test_bad_arguments_are_refused(cfgs):
  cfg, dcfg = cfgs
  dflash, _ = engines(cfgs, 0)
  from ddtree_jax.config import ConfigError
  with pytest.raises(ValueError, match="budget"):
    dflash.generate([[3, 4]], mode="ddtree", budget=0)
  with pytest.raises(ValueError, match="temperature"):
    dflash.generate([[3, 4]], sampling=SamplingParams(temperature=-1.0))
  with pytest.raises(ValueError, match="top_p"):
    dflash.generate([[3, 4]], sampling=SamplingParams(temperature=1.0, top_p=0.0))
  with pytest.raises(ValueError, match="outside the vocabulary"):
    dflash.generate([[3, cfg.vocab_size]], mode="ar")
  for seed in (-1, 2**32, 1.5, True):
    with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 2\*\*32\)"):
      dflash.generate([[3, 4]], mode="ar", seed=seed)
  with pytest.raises(ValueError, match="max_position_embeddings"):
    dflash.generate([[3] * (cfg.max_position_embeddings - 4)], mode="ar", max_new_tokens=8)
  v = cfg.vocab_size
  with pytest.raises(ValueError, match=re.escape(f"stop_ids: (3, {v}) has an id outside the vocabulary [0, {v})")):
    dflash.generate([[3, 4]], mode="ar", stop_ids=[3, cfg.vocab_size])
  prompts = random_prompts(np.random.default_rng(0), cfg, BATCH)
  for bad in (0, MAX_NEW + 1, True, 1.0):
    with pytest.raises(ValueError, match=r"stop_when\(0, ids\) returned .*; expected None or a token count in "
                       r"\[1, 1\]"):
      dflash.generate(prompts, mode="ar", max_new_tokens=MAX_NEW, stop_when=lambda i, ids: bad)
  with pytest.raises(ConfigError, match="vocab_size"):
    bad = dataclasses.replace(dcfg, vocab_size=cfg.vocab_size * 2)
    Engine(dflash_target(dflash), cfg, DFlashDrafter(bad, dtype=jnp.float32, rngs=nnx.Rngs(0)), bad)
  with pytest.raises(ConfigError, match="block_size"):
    dataclasses.replace(dcfg, block_size=1).check_against(cfg)


def dflash_target(engine):
  return nnx.merge(engine._t_graph, engine._t_params)


def test_streaming_callback_delivers_every_token_in_order(cfgs):
  cfg, _ = cfgs
  _, oracle = engines(cfgs, 0)
  prompts = random_prompts(np.random.default_rng(5), cfg, BATCH)
  got = {i: [] for i in range(BATCH)}
  calls = []
  res = oracle.generate(prompts, mode="ddtree", budget=DDTREE_BUDGETS[-1], max_new_tokens=MAX_NEW,
                        stream=lambda i, ids: (got[i].extend(ids), calls.append(len(ids))))
  assert [got[i] for i in range(BATCH)] == [r.token_ids for r in res]
  assert max(calls) > 1      # tokens arrive a round (several tokens) at a time
  for r in res:              # the prefill and the rounds after it make up the generation time
    n = len(r.token_ids)
    assert 0 < r.prefill_s and r.decode_tokens_per_s > 0
    assert r.prefill_s + (n - 1) / r.decode_tokens_per_s == pytest.approx(n / r.tokens_per_s, rel=1e-9)


# ---- chunked prefill (spec/prefill.py) --------------------------------------------------------------

CHUNK = 5   # divides none of the prompt lengths below, nor their padded length


def chunk_engines(cfgs, seed=0):
  """The same target and drafter prefilled in chunks of CHUNK and in one forward."""
  cfg, dcfg = cfgs
  target = DeepseekV3(cfg, dtype=jnp.float32, rngs=nnx.Rngs(seed))
  drafter = DFlashDrafter(dcfg, dtype=jnp.float32, rngs=nnx.Rngs(seed + 100))
  return (Engine(target, cfg, drafter, dcfg, prefill_chunk=CHUNK),
          Engine(target, cfg, drafter, dcfg, prefill_chunk=0))


def test_chunked_prefill_gives_one_shot_tokens_and_cache(cfgs):
  """A ragged batch of 13, 7 and 11 tokens (padded to 16: chunks of 5, the last one padded) gives the
  one-shot prefill's tokens in every mode at T=0 (and AR's at T=1 with the same seed), and caches
  close to the one-shot caches after the prefill."""
  chunked, one_shot = chunk_engines(cfgs)
  rng = np.random.default_rng(21)
  prompts = [rng.integers(2, cfgs[0].vocab_size - 1, size=n).tolist() for n in (13, 7, 11)]
  runs = [("ar", 1, SamplingParams()), ("dflash", 1, SamplingParams()), ("ddtree", 24, SamplingParams()),
          ("ar", 1, SamplingParams(temperature=1.0))]
  for mode, budget, sampling in runs:
    want = [r.token_ids for r in one_shot.generate(prompts, mode=mode, budget=budget, sampling=sampling,
                                                   max_new_tokens=MAX_NEW, seed=4)]
    got = [r.token_ids for r in chunked.generate(prompts, mode=mode, budget=budget, sampling=sampling,
                                                 max_new_tokens=MAX_NEW, seed=4)]
    assert got == want, (mode, sampling)
  # The state right after the prefill (max_new_tokens=1: no round runs).
  _, a = one_shot.run(prompts, mode="ddtree", budget=24, max_new_tokens=1)
  _, b = chunked.run(prompts, mode="ddtree", budget=24, max_new_tokens=1)
  np.testing.assert_array_equal(np.asarray(a.out[:, 0]), np.asarray(b.out[:, 0]))
  for x, y in ((a.cache.lengths, b.cache.lengths), (a.drafter_cache.lengths, b.drafter_cache.lengths)):
    np.testing.assert_array_equal(np.asarray(x), [13, 7, 11])
    np.testing.assert_array_equal(np.asarray(y), [13, 7, 11])
  pairs = list(zip(a.cache.ckv + a.cache.kpe + a.drafter_cache.k + a.drafter_cache.v,
                   b.cache.ckv + b.cache.kpe + b.drafter_cache.k + b.drafter_cache.v))
  for x, y in pairs:
    for i, p in enumerate(prompts):
      np.testing.assert_allclose(np.asarray(y[i, :len(p)]), np.asarray(x[i, :len(p)]), atol=2e-5, rtol=1e-4)


def test_one_chunk_program_serves_prompt_lengths_of_one_capacity_bucket(cfgs):
  from ddtree_jax import engine as engine_mod
  chunked, one_shot = chunk_engines(cfgs)
  programs = lambda: [k for k in engine_mod._COMPILED if k[0] == "prefill_chunk" and k[2] == chunked._graphs_id]
  rng = np.random.default_rng(22)
  short = [rng.integers(2, 200, size=n).tolist() for n in (13, 7, 11)]     # 4 chunks
  long = [rng.integers(2, 200, size=n).tolist() for n in (30, 3, 21)]      # 7 chunks
  chunked.generate(short, mode="ar", max_new_tokens=MAX_NEW)
  before = len(programs())
  got = [r.token_ids for r in chunked.generate(long, mode="ar", max_new_tokens=MAX_NEW)]
  assert len(programs()) == before
  assert got == [r.token_ids for r in one_shot.generate(long, mode="ar", max_new_tokens=MAX_NEW)]


def test_prefill_chunk_layout_and_bad_values(cfgs):
  from ddtree_jax.cli.common import UsageError, parse_prefill_chunk
  from ddtree_jax.spec.prefill import chunk_layout
  assert chunk_layout(32, 5) == (5, 7) and chunk_layout(1024, 512) == (512, 2)
  assert chunk_layout(16, 512) == (16, 1) and chunk_layout(16, None) == (16, 1)
  cfg, _ = cfgs
  target = DeepseekV3(cfg, dtype=jnp.float32, rngs=nnx.Rngs(0))
  for bad in (-1, 2.5, "64"):
    with pytest.raises(ValueError, match="prefill_chunk"):
      Engine(target, cfg, prefill_chunk=bad)
  assert Engine(target, cfg, prefill_chunk=0).prefill_chunk is None
  with pytest.raises(UsageError, match="--prefill_chunk=-3: must be >= 0"):
    parse_prefill_chunk(-3)
  assert parse_prefill_chunk(0) is None and parse_prefill_chunk(256) == 256


def test_init_state_is_one_compiled_program_per_shape(cfgs):
  """init_state builds the empty state in one cached program (eagerly it was ~30 dispatches a generate); its
  arrays equal the eager build's, its key is jax.random.key(seed), and generate reuses the program."""
  cfg, dcfg = cfgs
  dflash, _ = engines(cfgs, 0)
  stops = np.array([[3, -1], [5, 7]], np.int32)
  state = dflash.init_state(2, 128, 64 + dcfg.block_size, 64, 1234, 2, max_new=9, stop_ids=stops, expected_width=5)
  eager = dflash._init_state(2, 128, 64 + dcfg.block_size, 64, 1234, 2)
  for name in ("bonus", "out", "out_len", "done", "rounds", "per_round"):
    np.testing.assert_array_equal(np.asarray(getattr(state, name)), np.asarray(getattr(eager, name)), name)
  np.testing.assert_array_equal(jax.random.key_data(state.key), jax.random.key_data(jax.random.key(1234)))
  np.testing.assert_array_equal(np.asarray(state.max_new), [9, 9])
  np.testing.assert_array_equal(np.asarray(state.stop_ids), stops)
  assert state.expected.shape == (2, 5) and not np.asarray(state.expected).any()
  assert jax.tree.map(np.shape, state.cache) == jax.tree.map(np.shape, eager.cache)
  assert not np.asarray(state.cache.lengths).any()
  assert len(dflash._init_programs) == 1
  dflash.init_state(2, 128, 64 + dcfg.block_size, 64, 99, 2, max_new=3, expected_width=5)   # same shape
  assert len(dflash._init_programs) == 1
  with pytest.raises(ValueError, match=r"stop_ids has shape \(1, 2\), expected \(2, 2\)"):
    dflash.init_state(2, 128, 64 + dcfg.block_size, 64, 0, 2, stop_ids=np.zeros((1, 2), np.int32))
  prompts = [[1, 2, 3], [4, 5]]
  first = dflash.generate(prompts, max_new_tokens=4)
  n = len(dflash._init_programs)
  again = dflash.generate(prompts, max_new_tokens=4, seed=5)
  assert len(dflash._init_programs) == n and [r.token_ids for r in again] == [r.token_ids for r in first]
