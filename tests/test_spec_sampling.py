"""Lossless at T > 0 (issue 4): the joint distribution of the first three generated tokens under
`ddtree` (and `ar`, as a control) matches the target's exact distribution.

Tokens 2 and 3 come from speculative rounds (token 1 from the prefill). With top_k = 4 the support
is at most 4^3 = 64 sequences, whose exact probabilities are computed from the target's logits in
NumPy. A chi-square goodness-of-fit test at significance 0.001 (fixed seeds, so the outcome is
deterministic) must not reject; as a check of the test's power, the same samples must be rejected
against the distribution at a different temperature.
"""
import jax
import jax.numpy as jnp
import jax.scipy.special as jsp
import numpy as np
import pytest
from flax import nnx

from configs.tiny import tiny, tiny_drafter
from ddtree_jax.cache import init_latent_cache
from ddtree_jax.engine import Engine
from ddtree_jax.model.deepseek import DeepseekV3
from ddtree_jax.model.dflash import DFlashDrafter
from ddtree_jax.sampling import SamplingParams
from ddtree_jax.spec.oracle import OracleDrafter

ALPHA = 1e-3
N_SAMPLES = 768
TOP_K = 4
PROMPT = [17, 33, 5, 90, 41]


def softmax_topk(logits, temperature):
  z = np.asarray(logits, np.float64) / temperature
  idx = np.argsort(-z, kind="stable")[:TOP_K]
  p = np.exp(z[idx] - z[idx].max())
  return idx, p / p.sum()


def next_logits_fn(target, cfg):
  """-> next_logits(seqs): each sequence's next-token logits [len(seqs), V], from one jitted forward of
  the target (a plain causal forward, not the engine) over the sequences right-padded to one shape: a
  position's logits do not depend on the padding after it (causal attention, per-token routing), and a
  single shape is a single compilation (an eager forward spends seconds per shape on per-op compiles)."""
  graph, state = nnx.split(target)
  b, t = TOP_K, len(PROMPT) + 2

  @jax.jit
  def forward(state, ids):
    cache = init_latent_cache(cfg.num_hidden_layers, b, t, cfg.kv_lora_rank, cfg.qk_rope_head_dim, jnp.float32)
    mask = jnp.broadcast_to(jnp.tril(jnp.ones((t, t), bool)), (b, t, t))
    return nnx.merge(graph, state)(ids, jnp.broadcast_to(jnp.arange(t), (b, t)), cache, mask).logits

  def next_logits(seqs):
    ids = np.zeros((b, t), np.int32)
    for i, q in enumerate(seqs):
      ids[i, :len(q)] = q
    logits = np.asarray(forward(state, jnp.asarray(ids)))
    return np.stack([logits[i, len(q) - 1] for i, q in enumerate(seqs)])
  return next_logits


def exact_joint(next_logits, temperature):
  """{(t1, t2, t3): probability} under top-k=4 sampling at `temperature` (next_logits: `next_logits_fn`)."""
  p1_ids, p1 = softmax_topk(next_logits([PROMPT])[0], temperature)
  joint = {}
  seqs2 = [PROMPT + [int(a)] for a in p1_ids]
  l2 = next_logits(seqs2)
  for i, a in enumerate(p1_ids):
    ids2, p2 = softmax_topk(l2[i], temperature)
    seqs3 = [PROMPT + [int(a), int(b)] for b in ids2]
    l3 = next_logits(seqs3)
    for j, b in enumerate(ids2):
      ids3, p3 = softmax_topk(l3[j], temperature)
      for k, c in enumerate(ids3):
        joint[(int(a), int(b), int(c))] = p1[i] * p2[j] * p3[k]
  return joint


def chi_square_pvalue(samples, joint):
  """Goodness of fit; cells with expected count < 5 are pooled. Samples outside the support count
  as a violation of the pooled cell with expected 0 (p-value 0)."""
  n = len(samples)
  counts = {}
  for s in samples:
    counts[s] = counts.get(s, 0) + 1
  if any(s not in joint for s in counts):
    return 0.0
  big = [c for c, p in joint.items() if p * n >= 5]
  small = [c for c in joint if c not in big]
  obs = [counts.get(c, 0) for c in big] + [sum(counts.get(c, 0) for c in small)]
  exp = [joint[c] * n for c in big] + [sum(joint[c] for c in small) * n]
  if exp[-1] == 0:
    obs, exp = obs[:-1], exp[:-1]
  chi2 = sum((o - e) ** 2 / e for o, e in zip(obs, exp))
  df = len(obs) - 1
  return float(jsp.gammaincc(df / 2.0, chi2 / 2.0))


@pytest.fixture(scope="module")
def setup():
  cfg = tiny(stop_token_ids=())
  dcfg = tiny_drafter(cfg, block_size=4)
  target = DeepseekV3(cfg, dtype=jnp.float32, rngs=nnx.Rngs(5))
  # Random weights give nearly flat logits; sharpen them so that the distribution has structure
  # (which gives the test power and the oracle drafter something to get right).
  target.lm_head.kernel[...] = target.lm_head.kernel[...] * 25.0
  next_logits = next_logits_fn(target, cfg)
  return cfg, dcfg, target, exact_joint(next_logits, 1.0), exact_joint(next_logits, 0.6)


@pytest.mark.parametrize("drafter_kind, mode", [("oracle", "ddtree"), ("dflash", "ddtree"), ("oracle", "ar")])
def test_sampled_distribution_matches_target(setup, drafter_kind, mode):
  cfg, dcfg, target, joint, wrong = setup
  drafter = OracleDrafter(dcfg.block_size) if drafter_kind == "oracle" else \
      DFlashDrafter(dcfg, dtype=jnp.float32, rngs=nnx.Rngs(9))
  eng = Engine(target, cfg, drafter, dcfg)
  res = eng.generate([PROMPT] * N_SAMPLES, mode=mode, budget=6, max_new_tokens=3, seed=1234,
                     sampling=SamplingParams(temperature=1.0, top_k=TOP_K))
  samples = [tuple(r.token_ids) for r in res]
  assert all(len(s) == 3 for s in samples)
  if mode == "ddtree" and drafter_kind == "oracle":
    assert np.mean([r.tau for r in res]) > 1.2    # the drafts are really being accepted
  p = chi_square_pvalue(samples, joint)
  assert p > ALPHA, f"{drafter_kind}/{mode}: chi-square p = {p:.2e} rejects the target distribution"
  assert chi_square_pvalue(samples, wrong) < ALPHA, "the test has no power against T=0.6"
