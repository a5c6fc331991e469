"""The on-device DDTree builder against a brute-force enumeration of all prefixes."""
import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ddtree_jax.spec.tree import build_tree, position_ids


@functools.lru_cache(maxsize=None)
def _builder(budget):
  return jax.jit(lambda lp, tok, root: build_tree(lp, tok, budget, root_tokens=root))


def _draft(rng, batch, L, V, K, ties=False, peaked=False):
  """Random per-position distributions over V tokens -> sorted top-K log-probs and tokens (numpy)."""
  if ties:
    logits = rng.integers(0, 3, size=(batch, L, V)).astype(np.float64)
  else:
    logits = rng.normal(size=(batch, L, V)) * (8.0 if peaked else 1.5)
  logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  order = np.argsort(-logp, axis=-1, kind="stable")[..., :K]
  return (np.take_along_axis(logp, order, -1).astype(np.float32), order.astype(np.int32))


def _run(lp, tok, budget, root=None):
  b = lp.shape[0]
  root = np.arange(b, dtype=np.int32) + 1000 if root is None else root
  t = _builder(budget)(jnp.asarray(lp), jnp.asarray(tok), jnp.asarray(root))
  return jax.tree.map(np.asarray, t)


def _all_prefixes(lp, tok):
  """All prefixes (rank tuples) with scores: [(ranks, tokens, score)]."""
  L, K = lp.shape
  out = []
  for d in range(1, L + 1):
    for ranks in itertools.product(range(K), repeat=d):
      score = float(sum(np.float64(lp[i, r]) for i, r in enumerate(ranks)))
      out.append((ranks, tuple(int(tok[i, r]) for i, r in enumerate(ranks)), score))
  return out


def _paths(t, b):
  """Token path of each node (root excluded) from the parents array."""
  n1 = t.tokens.shape[1]
  paths = {0: ()}
  for n in range(1, n1):
    if t.valid[b, n]:
      paths[n] = paths[int(t.parents[b, n])] + (int(t.tokens[b, n]),)
  return paths


def _check_structure(t, lp, tok, b):
  n1 = t.tokens.shape[1]
  L, K = lp.shape
  assert t.valid[b, 0] and t.parents[b, 0] == -1 and t.depths[b, 0] == 0 and t.scores[b, 0] == 0
  nvalid = int(t.valid[b].sum())
  # Valid nodes come first, padding after.
  assert t.valid[b, :nvalid].all() and not t.valid[b, nvalid:].any()
  for n in range(1, n1):
    p = int(t.parents[b, n])
    if not t.valid[b, n]:
      assert p == -1 and t.depths[b, n] == 0 and t.tokens[b, n] == 0 and np.isneginf(t.scores[b, n])
      expect = np.zeros(n1, bool)
      expect[[0, n]] = True
      np.testing.assert_array_equal(t.ancestors[b, n], expect)
      assert not t.ancestors[b, :, n][np.arange(n1) != n].any()
      continue
    assert 0 <= p < n, "a parent precedes its child"
    assert t.valid[b, p]
    d = int(t.depths[b, n])
    assert d == t.depths[b, p] + 1 and 1 <= d <= L
    r = int(t.ranks[b, n])
    assert tok[d - 1, r] == t.tokens[b, n]
    np.testing.assert_allclose(t.scores[b, n], t.scores[b, p] + lp[d - 1, r], rtol=1e-5, atol=1e-5)
    # Ancestor row: the chain to the root plus itself.
    expect = np.zeros(n1, bool)
    j = n
    while j != -1:
      expect[j] = True
      j = int(t.parents[b, j])
    np.testing.assert_array_equal(t.ancestors[b, n], expect)
  np.testing.assert_array_equal(t.ancestors[b, 0], np.eye(n1, dtype=bool)[0])
  # Siblings carry distinct tokens.
  seen = set()
  for n in range(1, nvalid):
    key = (int(t.parents[b, n]), int(t.tokens[b, n]))
    assert key not in seen, f"duplicate sibling token {key}"
    seen.add(key)
  return nvalid - 1


def _check_against_bruteforce(t, lp, tok, b, budget):
  nodes = _check_structure(t, lp, tok, b)
  allp = _all_prefixes(lp, tok)
  assert nodes == min(budget, len(allp))
  # Tokens along a path are distinct per rank at each position, so token paths identify prefixes.
  paths = _paths(t, b)
  chosen = set(paths[n] for n in range(1, nodes + 1))
  assert len(chosen) == nodes
  # Prefix-closed.
  for pth in chosen:
    assert len(pth) == 1 or pth[:-1] in chosen
  by_path = {p[1]: p[2] for p in allp}
  got = sorted((by_path[p] for p in chosen), reverse=True)
  want = sorted((p[2] for p in allp), reverse=True)[:nodes]
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  # Top-N property (tie-tolerant): no unchosen prefix beats a chosen one.
  if nodes < len(allp):
    worst_chosen = min(got)
    best_rest = max(by_path[p[1]] for p in allp if p[1] not in chosen)
    assert best_rest <= worst_chosen + 1e-5
  # Scores in pop order never increase.
  sc = t.scores[b, 1:nodes + 1]
  assert np.all(np.diff(sc) <= 1e-5)


@pytest.mark.parametrize("L,V,K,budget,ties", [
    (3, 4, 4, 10, False),
    (3, 4, 4, 10, True),
    (2, 3, 3, 20, False),   # budget > 3 + 9 prefixes: padding
    (4, 5, 3, 17, True),
    (1, 6, 6, 4, False),    # L = 1
    (3, 5, 5, 1, True),     # N = 1
])
def test_matches_bruteforce(L, V, K, budget, ties):
  rng = np.random.default_rng(1234 + L * 100 + V * 10 + budget)
  batch = 24
  lp, tok = _draft(rng, batch, L, V, K, ties=ties)
  t = _run(lp, tok, budget)
  assert t.tokens.shape == (batch, budget + 1) and t.ancestors.shape == (batch, budget + 1, budget + 1)
  np.testing.assert_array_equal(t.tokens[:, 0], np.arange(batch) + 1000)
  for b in range(batch):
    _check_against_bruteforce(t, lp[b], tok[b], b, budget)


def test_padding_when_few_prefixes():
  rng = np.random.default_rng(7)
  lp, tok = _draft(rng, 4, 2, 2, 2)          # 2 + 4 = 6 prefixes
  t = _run(lp, tok, 10)
  assert (t.valid.sum(1) == 7).all()
  assert not t.valid[:, 7:].any()


def test_single_node_is_argmax():
  rng = np.random.default_rng(3)
  lp, tok = _draft(rng, 8, 3, 5, 5)
  t = _run(lp, tok, 1)
  np.testing.assert_array_equal(t.tokens[:, 1], tok[:, 0, 0])
  assert (t.parents[:, 1] == 0).all() and (t.depths[:, 1] == 1).all()


def test_chain_for_peaked_distribution():
  """N = L with a (nearly) deterministic draft: the tree is the argmax chain."""
  rng = np.random.default_rng(11)
  L, V = 5, 16
  lp, tok = _draft(rng, 8, L, V, L, peaked=True)
  lp = lp.copy()
  lp[:, :, 0] = -1e-4          # each position's argmax has prob ~1
  lp[:, :, 1:] = np.minimum(lp[:, :, 1:], -20.0)
  t = _run(lp, tok, L)
  np.testing.assert_array_equal(t.tokens[:, 1:], tok[:, :, 0])
  np.testing.assert_array_equal(t.parents[:, 1:], np.broadcast_to(np.arange(L), (8, L)))
  np.testing.assert_array_equal(t.depths[:, 1:], np.broadcast_to(np.arange(1, L + 1), (8, L)))
  np.testing.assert_array_equal(t.ancestors[0], np.tril(np.ones((L + 1, L + 1), bool)))


def test_neg_inf_logprobs_no_nan():
  """Zero-probability tokens (-inf) in the top-K stay real prefixes and produce no NaN."""
  rng = np.random.default_rng(5)
  lp, tok = _draft(rng, 4, 3, 4, 4)
  lp = lp.copy()
  lp[:, :, 2:] = -np.inf
  t = _run(lp, tok, 10)
  assert not np.isnan(t.scores).any()
  for b in range(4):
    _check_structure(t, lp[b], tok[b], b)
  # 2 + 4 + 8 = 14 finite prefixes > 10: every chosen node has a finite score.
  assert np.isfinite(t.scores[:, 1:]).all()


def test_position_ids_and_default_root():
  rng = np.random.default_rng(9)
  lp, tok = _draft(rng, 3, 3, 4, 4)
  t = jax.tree.map(np.asarray, jax.jit(lambda a, b: build_tree(a, b, 10))(lp, tok))
  assert (t.tokens[:, 0] == -1).all()
  start = np.array([5, 0, 17], np.int32)
  pos = np.asarray(position_ids(t, jnp.asarray(start)))
  np.testing.assert_array_equal(pos, start[:, None] + t.depths)
