"""The tree-build and tree-walk Pallas kernels (interpret mode on the CPU) against their XLA references."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from custom_calls.tree_build import tree_build
from custom_calls.tree_verify import tree_walk


def random_topk(rng, b, L, K, ties=False, neg_inf=False):
  lp = np.log(rng.dirichlet(np.ones(64) * 0.3, size=(b, L)))[..., :K]
  lp = -np.sort(-lp, axis=-1)
  if ties:
    lp = np.round(lp)
  if neg_inf:
    lp[:, :, K // 2:] = -np.inf
  tok = np.stack([np.stack([rng.permutation(200)[:K] for _ in range(L)]) for _ in range(b)]).astype(np.int32)
  return jnp.asarray(lp, jnp.float32), jnp.asarray(tok)


@pytest.mark.parametrize("b, L, K, n, ties, neg_inf", [
    (2, 3, 4, 5, False, False), (3, 7, 8, 20, True, False), (2, 4, 2, 30, False, False),   # 30 > all prefixes
    (1, 15, 16, 16, False, False), (2, 5, 6, 12, False, True), (1, 1, 1, 1, False, False)])
def test_tree_build_kernel_matches_reference(b, L, K, n, ties, neg_inf):
  rng = np.random.default_rng(b * 100 + L * 10 + n)
  lp, tok = random_topk(rng, b, L, K, ties, neg_inf)
  ref = tree_build(lp, tok, n, impl="xla")
  got = tree_build(lp, tok, n, impl="pallas_interpret")
  for name, a, g in zip(("tokens", "parents", "depths", "scores", "ranks", "valid"), ref, got):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(g), err_msg=name)
  assert bool(jnp.all(got[5][:, 0]))


def random_tree_and_targets(rng, b, L, K, n, follow):
  lp, tok = random_topk(rng, b, L, K)
  tokens, parents, depths, _, _, valid = tree_build(lp, tok, n, impl="xla")
  tokens = np.asarray(tokens).copy()
  tokens[:, 0] = 7
  target = rng.integers(0, 200, size=tokens.shape).astype(np.int32)
  if follow:   # make the target agree with a random root-to-leaf path for a while
    par = np.asarray(parents)
    for i in range(b):
      cur = 0
      for _ in range(int(rng.integers(1, L + 1))):
        kids = np.nonzero((par[i] == cur) & np.asarray(valid)[i])[0]
        if not len(kids):
          break
        nxt = int(rng.choice(kids))
        target[i, cur] = tokens[i, nxt]
        cur = nxt
  return jnp.asarray(tokens), parents, valid, jnp.asarray(target)


@pytest.mark.parametrize("follow", [False, True])
@pytest.mark.parametrize("b, L, K, n", [(3, 4, 3, 9), (2, 7, 4, 24), (4, 15, 2, 15)])
def test_tree_walk_kernel_matches_reference(b, L, K, n, follow):
  rng = np.random.default_rng(n + follow)
  args = random_tree_and_targets(rng, b, L, K, n, follow)
  ref = tree_walk(*args, L, impl="xla")
  got = tree_walk(*args, L, impl="pallas_interpret")
  for a, g in zip(ref, got):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(g))
  if follow:
    assert int(jnp.max(ref[1])) > 1    # some paths were really accepted


@pytest.mark.gpu
@pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a CUDA GPU (Pallas Triton lowering)")
def test_tree_kernels_on_gpu():
  rng = np.random.default_rng(0)
  lp, tok = random_topk(rng, 4, 15, 64, ties=True)
  ref = tree_build(lp, tok, 64, impl="xla")
  got = tree_build(lp, tok, 64, impl="pallas")
  for a, g in zip(ref, got):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(g))
  args = random_tree_and_targets(rng, 4, 15, 8, 64, True)
  for a, g in zip(tree_walk(*args, 15, impl="xla"), tree_walk(*args, 15, impl="pallas")):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(g))
