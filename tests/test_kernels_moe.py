"""INT4 grouped MoE kernel (Pallas Triton) against the XLA reference.

CPU runs use the Pallas interpreter (impl="pallas_interpret") on small shapes; the GPU test runs the
compiled kernels at the K2.6 per-GPU expert shapes and is skipped without a GPU.
"""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from custom_calls.moe_int4 import repack, routed_experts_int4
from custom_calls.moe_int4.layout import quantize_int4
from custom_calls.moe_int4.pallas_triton import default_blocks, down_tile_width, route, routed_experts_int4_pallas
from custom_calls.moe_int4.reference import routed_experts_int4_reference
from custom_calls.random_inputs import random_int4_experts
from tests.kernel_checks import rel_err


def make_inputs(seed, n, k, e_total, e_local, d, inter, dtype, ids=None):
  rng = np.random.default_rng(seed)
  x = jnp.asarray(rng.standard_normal((n, d)), jnp.float32).astype(dtype)
  if ids is None:
    ids = np.stack([rng.choice(e_total, k, replace=False) for _ in range(n)])
  w = rng.random((n, k)).astype(np.float32) + 0.1
  experts = []
  for shape in ((e_local, inter, d), (e_local, inter, d), (e_local, d, inter)):
    experts += quantize_int4(rng.standard_normal(shape) * 0.05)
  experts = repack(*map(jnp.asarray, experts))
  return x, jnp.asarray(ids, jnp.int32), jnp.asarray(w), experts


def k26_shard_inputs(seed, n):
  """Random inputs at the K2.6 shard's shapes (48 local experts of 384, D 7168, I 2048; bf16 x) for the GPU tests:
  (x, ids, w, stored experts). ids over 0..95, repeats allowed: ~4 local pairs a token."""
  from custom_calls.random_inputs import random_int4_experts
  ks = jax.random.split(jax.random.PRNGKey(seed), 9)
  stored = random_int4_experts(ks[:6], 48, 7168, 2048)
  x = jax.random.normal(ks[6], (n, 7168), jnp.bfloat16)
  return x, jax.random.randint(ks[7], (n, 8), 0, 96), jax.random.uniform(ks[8], (n, 8)), stored


def reference_f32(x, ids, w, experts, offset):
  return routed_experts_int4_reference(x.astype(jnp.float32), ids, w, *experts, expert_offset=offset)


def check_one_launch_against_two(one_launch, two_launches, x, ids, w, stored):
  """The GPU check of a one-launch MoE kernel (offset 0): one_launch(x) and two_launches(x), each a call of x alone,
  at x and 2x in ONE program, so that where the counters the one-launch kernel updates in place are a compile-time
  constant (the grouped kernel's) XLA must give each call its own copy, and where they are made with the planes
  (the gemv's, planes_consts.py) each call makes its own. Both one-launch outputs must match the reference (1e-2
  relative) and, bit for bit, the two-launch kernels': a down tile that read h before all of its gate/up tiles were
  stored (a race the 1e-2 norm could miss) fails there."""
  first, second, first_two, second_two = jax.jit(
      lambda xx: (one_launch(xx), one_launch(xx * 2), two_launches(xx), two_launches(xx * 2)))(x)
  assert rel_err(first, reference_f32(x, ids, w, stored, 0)) < 1e-2
  assert rel_err(second, reference_f32(x * 2, ids, w, stored, 0)) < 1e-2
  np.testing.assert_array_equal(np.asarray(first.astype(jnp.float32)), np.asarray(first_two.astype(jnp.float32)))
  np.testing.assert_array_equal(np.asarray(second.astype(jnp.float32)), np.asarray(second_two.astype(jnp.float32)))


CASES = [
    # (tokens, top-k, global experts, local experts, expert_offset, dtype, kernel options)
    (5, 4, 12, 6, 3, jnp.float32, {}),                                             # expert parallel shard
    (9, 3, 16, 8, 0, jnp.bfloat16, dict(block_m=16, block_n=32, block_k=64)),      # bf16, small tiles
    (1, 2, 6, 6, 0, jnp.float32, {}),                                              # one token: most experts empty
    (7, 3, 8, 8, 0, jnp.bfloat16, dict(planar=True, block_k=128, block_n=32)),     # reshape-free dequant
]


@pytest.mark.parametrize("n,k,e_total,e_local,offset,dtype,opts", CASES)
def test_matches_reference(n, k, e_total, e_local, offset, dtype, opts):
  x, ids, w, experts = make_inputs(n * 7 + k, n, k, e_total, e_local, 256, 128, dtype)
  out = routed_experts_int4_pallas(x, ids, w, *experts, offset, interpret=True, **opts)
  assert out.shape == x.shape and out.dtype == dtype
  tol = 1e-5 if dtype == jnp.float32 else 1e-2
  assert rel_err(out, reference_f32(x, ids, w, experts, offset)) < tol


def test_float16_activations_take_the_unscaled_dequant():
  """float16 x: the planes' 2**-16 pre-scale would fall below float16's normal range, so the default is the
  non-planar dequant (as accurate as the gemv's float32 planes) and planar=True is refused."""
  from custom_calls.moe_int4.pallas_gemv import routed_experts_int4_gemv
  x, ids, w, experts = make_inputs(7, 5, 3, 8, 8, 256, 128, jnp.float16)
  ref = reference_f32(x, ids, w, experts, 0)
  out = routed_experts_int4_pallas(x, ids, w, *experts, 0, interpret=True)
  assert out.dtype == jnp.float16 and rel_err(out, ref) < 1e-3
  assert rel_err(routed_experts_int4_gemv(x, ids, w, *experts, 0, block_k=128, interpret=True), ref) < 1e-3
  with pytest.raises(ValueError, match="float16"):
    routed_experts_int4_pallas(x, ids, w, *experts, 0, planar=True, interpret=True)


def test_tokens_without_local_expert_and_traced_offset():
  """Token 0 hits only remote experts (its row must be exactly zero); the offset is a traced value."""
  n, k, e_total, e_local, offset = 4, 2, 12, 4, 4
  ids = np.array([[0, 11], [4, 9], [5, 7], [2, 6]])
  x, ids, w, experts = make_inputs(5, n, k, e_total, e_local, 256, 128, jnp.float32, ids=ids)
  f = jax.jit(lambda off: routed_experts_int4(x, ids, w, *experts, expert_offset=off, impl="pallas_interpret"))
  out = f(jnp.int32(offset))
  ref = reference_f32(x, ids, w, experts, offset)
  assert rel_err(out, ref) < 1e-5
  np.testing.assert_array_equal(np.asarray(out[0]), 0.0)


def test_down_tile_width_follows_defaults_and_explicit_tiles():
  """k-chunked experts at a few tokens: gate/up tiles of 32 and down tiles of 64 by default; an explicit block_n
  sizes both (the kernels' contract); an explicit block_n_down wins; elsewhere the down tiles are block_n wide."""
  def resolve(tokens, k_chunk, block_n=None, block_n_down=None):
    blocks = default_blocks(tokens, 48, k_chunk)
    return down_tile_width(block_n_down, block_n, blocks[6], blocks[1])
  assert default_blocks(8, 48, 256)[1] == 32 and resolve(8, 256) == 64
  assert resolve(12, 256) == 64 and resolve(13, 256) == default_blocks(13, 48, 256)[1] == 128
  assert resolve(8, 256, block_n=128) == 128 and resolve(8, 256, block_n=128, block_n_down=16) == 16
  assert resolve(8, None) == default_blocks(8, 48)[1] == 32                     # stored layout: one width


def test_route_padding():
  ids = jnp.asarray([[0, 3], [3, 5], [3, 0]], jnp.int32)           # local experts 0..3 (5 is remote)
  row_token, pos, is_local, valid, bexp = route(ids, 4, 0, 4)
  assert np.asarray(is_local).tolist() == [[True, True], [True, False], [True, True]]
  used = int(np.asarray(valid).sum())
  assert used == 2                                                  # expert 0 (2 rows) and 3 (3 rows)
  assert np.asarray(bexp)[:used].tolist() == [0, 3]
  rt = np.asarray(row_token)
  for t in range(3):
    for j in range(2):
      if is_local[t, j]:
        assert rt[int(pos[t, j])] == t


@pytest.mark.parametrize("n,k,e_local,offset,block_m", [(3, 2, 4, 0, 4), (37, 8, 6, 5, 16), (5, 8, 48, 100, 16)])
def test_route_by_rank_equals_argsort_route(n, k, e_local, offset, block_m):
  rng = np.random.default_rng(n * k)
  ids = jnp.asarray(rng.integers(0, offset + e_local + 7, size=(n, k)), jnp.int32)   # repeats, remote, local
  by_rank = route(ids, e_local, offset, block_m, by_rank=True)
  by_sort = route(ids, e_local, offset, block_m, by_rank=False)
  for name, a, b in zip(("row_token", "pos", "is_local", "block_valid", "block_expert"), by_rank, by_sort):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=name)


def test_dispatch():
  x, ids, w, experts = make_inputs(2, 3, 2, 8, 8, 256, 128, jnp.float32)
  ref = routed_experts_int4(x, ids, w, *experts, impl="xla")
  if jax.default_backend() != "gpu":
    np.testing.assert_array_equal(np.asarray(routed_experts_int4(x, ids, w, *experts)), np.asarray(ref))
  with pytest.raises(ValueError):
    routed_experts_int4(x, ids, w, *experts, impl="triton")


@pytest.mark.gpu
@pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a GPU backend (jax.default_backend() == 'gpu')")
@pytest.mark.parametrize("kernel", ["grouped", "grouped_f32_planes", "gemv", "grouped_k_chunks", "gemv_k_chunks",
                                    "gemv_prefetch1", "gemv_prefetch2_k_chunks"])
@pytest.mark.parametrize("n", [1, 64, 600])
def test_gpu_kernel(n, kernel):
  e, d, inter = 48, 7168, 2048
  ks = jax.random.split(jax.random.PRNGKey(n), 8)
  experts = random_int4_experts(ks[:6], e, d, inter)
  x = jax.random.normal(ks[6], (n, d), jnp.bfloat16)
  ids = jax.random.randint(ks[7], (n, 8), 0, 384)     # repeats allowed: each pair counts on its own
  w = jax.random.uniform(ks[7], (n, 8))
  ref = reference_f32(x, ids, w, experts, 0)
  if kernel.endswith("_k_chunks"):                    # the same arrays k-chunked (k_chunks.py), chunk 256
    from custom_calls.moe_int4.k_chunks import experts_to_k_chunks
    experts = experts_to_k_chunks(experts, 256)
    kernel = kernel[:-len("_k_chunks")]
  if kernel == "grouped_f32_planes":                  # nibbles.py's float32 planes instead of bf16_planes.py
    out = routed_experts_int4_pallas(x, ids, w, *experts, 0, planar=True, exact_bf16=False)
  elif kernel.startswith("gemv"):                     # gemv_prefetchP: the K loop loading P-ahead (_tile_gemv)
    from custom_calls.moe_int4.pallas_gemv import routed_experts_int4_gemv
    prefetch = int(kernel[-1]) if kernel.startswith("gemv_prefetch") else None
    out = routed_experts_int4_gemv(x, ids, w, *experts, 0, prefetch=prefetch)
  else:
    out = routed_experts_int4_pallas(x, ids, w, *experts, 0)
  assert rel_err(out, ref) < 1e-2


def test_gemv_through_dispatch_repeated_experts_and_traced_offset():
  """Below ONE_LAUNCH_MIN_TOKENS tokens (one token) the dispatch runs pallas_gemv's two launches: a token routed
  twice to one expert counts twice, a token with no local expert gives an exact zero row, and the offset may be
  traced. (From there to GEMV_MAX_TOKENS: tests/test_moe_gemv_pipelined.py.)"""
  from custom_calls.moe_int4 import ONE_LAUNCH_MIN_TOKENS
  n, k, e_total, e_local, offset = ONE_LAUNCH_MIN_TOKENS - 1, 4, 12, 6, 4
  assert n >= 1
  for seed, token_ids in ((11, [4, 4, 1, 7]), (12, [0, 1, 2, 11])):   # a repeated local expert; none in [4, 10)
    ids = np.array([token_ids] * n)
    x, ids, w, experts = make_inputs(seed, n, k, e_total, e_local, 256, 256, jnp.float32, ids=ids)
    f = jax.jit(lambda off: routed_experts_int4(x, ids, w, *experts, expert_offset=off, impl="pallas_interpret"))
    assert "moe_int4_gemv_pipelined" not in str(jax.make_jaxpr(f)(jnp.int32(offset)))
    out = f(jnp.int32(offset))
    if token_ids[0] == 0:                                            # no local expert: an exact zero row
      np.testing.assert_array_equal(np.asarray(out), 0.0)
    else:
      assert rel_err(out, reference_f32(x, ids, w, experts, offset)) < 1e-5


GEMV_CASES = [
    # (tokens, top-k, global experts, local experts, expert_offset, dtype, D, I, kernel options)
    (5, 4, 12, 6, 3, jnp.float32, 512, 256, dict(block_k=128, sort_pairs=False)),          # shard, token order
    (9, 3, 16, 8, 0, jnp.bfloat16, 256, 256, dict(block_k=128, block_n=8, sort_pairs=True)),  # sorted pairs
    (9, 3, 8, 4, 0, jnp.float32, 256, 256, dict(block_k=128, sort_pairs=True, rows_per_run=4)),  # runs of 4
    (9, 3, 8, 4, 0, jnp.float32, 256, 256, dict(block_k=128, sort_pairs=False, rows_per_run=2)),  # token order
    (7, 3, 12, 6, 2, jnp.bfloat16, 256, 256,                                 # pairs split 3 ways
     dict(block_k=128, block_n=16, block_n_down=16, pair_splits=3)),
    (5, 4, 12, 6, 3, jnp.bfloat16, 512, 256, dict(block_k=128)),             # the defaults: split 5 ways
    (7, 3, 8, 4, 0, jnp.float32, 256, 256,                                   # sorted, split 2 ways
     dict(block_k=128, sort_pairs=True, pair_splits=2)),
]


@pytest.mark.parametrize("n,k,e_total,e_local,offset,dtype,d,inter,opts", GEMV_CASES)
def test_gemv_matches_reference(n, k, e_total, e_local, offset, dtype, d, inter, opts):
  """The few-token kernels (column-tile programs looping over the pairs; CUDA-core dequantisation with
  shift-free nibble planes)."""
  from custom_calls.moe_int4.pallas_gemv import routed_experts_int4_gemv
  x, ids, w, experts = make_inputs(n * 3 + k, n, k, e_total, e_local, d, inter, dtype)
  out = routed_experts_int4_gemv(x, ids, w, *experts, offset, interpret=True, **opts)
  assert out.shape == x.shape and out.dtype == dtype
  tol = 1e-5 if dtype == jnp.float32 else 1e-2
  assert rel_err(out, reference_f32(x, ids, w, experts, offset)) < tol


@pytest.mark.parametrize("prefetch,opts,chunk", [
    (1, dict(block_k=128, sort_pairs=False), None),           # 4 K steps gate/up, 2 down; token order, no order array
    (2, dict(block_k=128, sort_pairs=True, rows_per_run=4), None),  # runs of rows share the prefetched tiles
    (1, dict(block_k=256), 64),                               # k-chunked [4, BN, 8] tiles; down: one K step, no loop
    (2, dict(block_k=256, pair_splits=2), 128),               # pairs split 2 ways, activations prefetched too
])
def test_gemv_prefetch_gives_the_same_bits(prefetch, opts, chunk):
  """Loading the next K step ahead changes when the loads are issued, not what is summed or in which order."""
  from custom_calls.moe_int4.k_chunks import experts_to_k_chunks
  from custom_calls.moe_int4.pallas_gemv import routed_experts_int4_gemv
  x, ids, w, stored = make_inputs(21, 5, 3, 12, 6, 512, 256, jnp.float32)
  experts = experts_to_k_chunks(stored, chunk) if chunk else stored
  plain = routed_experts_int4_gemv(x, ids, w, *experts, 3, interpret=True, prefetch=0, **opts)
  ahead = routed_experts_int4_gemv(x, ids, w, *experts, 3, interpret=True, prefetch=prefetch, **opts)
  np.testing.assert_array_equal(np.asarray(ahead), np.asarray(plain))
  assert rel_err(ahead, reference_f32(x, ids, w, stored, 3)) < 1e-5


@pytest.mark.parametrize("n,opts", [
    (1, dict(block_k=128)),                                   # token order: both kernels' pair loops unrolled
    (3, dict(block_k=128, pair_splits=3)),                    # compacted visits; the down kernel's top-k unrolled
    (2, dict(block_k=128, sort_pairs=True, rows_per_run=2)),  # sorted runs: nothing to unroll, same path
])
def test_gemv_unrolled_pairs_give_the_same_bits(n, opts):
  """Visiting the pairs in straight-line code changes when the expert ids are loaded, not what is summed."""
  from custom_calls.moe_int4.pallas_gemv import routed_experts_int4_gemv
  x, ids, w, experts = make_inputs(23, n, 3, 12, 6, 512, 256, jnp.float32)
  ids = ids.at[0, 1].set(ids[0, 0])                         # a token routed twice to one expert
  assert np.any((np.asarray(ids) >= 3) & (np.asarray(ids) < 9)), "the test needs local pairs (experts 3..8)"
  looped = routed_experts_int4_gemv(x, ids, w, *experts, 3, interpret=True, unroll_pairs=False, **opts)
  unrolled = routed_experts_int4_gemv(x, ids, w, *experts, 3, interpret=True, unroll_pairs=True, **opts)
  np.testing.assert_array_equal(np.asarray(unrolled), np.asarray(looped))
  assert rel_err(unrolled, reference_f32(x, ids, w, experts, 3)) < 1e-5


@pytest.mark.parametrize("opts,chunk", [
    (dict(block_k=512, block_k_down=128, num_warps_down=8), None),        # gate/up K steps 256, down 2 x 128
    (dict(block_k=256, block_k_down=128, pair_splits=2), 64),             # k-chunked, [2, BN, 8] down tiles
    (dict(block_k=256, block_k_down=128, sort_pairs=True, rows_per_run=2), None),
])
def test_gemv_down_kernel_options(opts, chunk):
  """The down kernel's own K step and warps: the same sums in another order (fp32 rounding only)."""
  from custom_calls.moe_int4.k_chunks import experts_to_k_chunks
  from custom_calls.moe_int4.pallas_gemv import routed_experts_int4_gemv
  x, ids, w, stored = make_inputs(29, 3, 3, 12, 6, 512, 256, jnp.float32)
  assert np.any((np.asarray(ids) >= 3) & (np.asarray(ids) < 9)), "the test needs local pairs (experts 3..8)"
  experts = experts_to_k_chunks(stored, chunk) if chunk else stored
  out = routed_experts_int4_gemv(x, ids, w, *experts, 3, interpret=True, **opts)
  assert rel_err(out, reference_f32(x, ids, w, stored, 3)) < 1e-5


@pytest.mark.parametrize("n,splits,offset", [(3, 3, 3), (5, 2, 0), (2, 4, 3), (2, 4, 9)])   # P 9 / 15 / 6 / 6
def test_gemv_rank_in_kernel_gives_the_same_bits(n, splits, offset):
  """Each program ranking the local pairs itself visits what XLA's compaction and argsort order visits. The pair
  counts are not powers of two; (2, 4, 3) has more programs per column tile than local pairs; offset 9 leaves
  experts 9..14, none of which is hit below (no local pair: the output is zero both ways)."""
  from custom_calls.moe_int4.pallas_gemv import routed_experts_int4_gemv
  x, ids, w, experts = make_inputs(31 + n, n, 3, 9, 6, 512, 256, jnp.float32)
  ids = ids.at[0, 1].set(ids[0, 0])                         # a token routed twice to one expert
  run = jax.jit(lambda off, ranked: routed_experts_int4_gemv(x, ids, w, *experts, off, interpret=True, block_k=128,
                                                             pair_splits=splits, rank_in_kernel=ranked),
                static_argnums=1)
  ordered, ranked = run(jnp.int32(offset), False), run(jnp.int32(offset), True)
  np.testing.assert_array_equal(np.asarray(ranked), np.asarray(ordered))
  if offset == 9:
    assert not np.any(np.asarray(ranked))
  else:
    assert rel_err(ranked, reference_f32(x, ids, w, experts, offset)) < 1e-5


def test_gemv_rejects_bad_options():
  from custom_calls.moe_int4.pallas_gemv import routed_experts_int4_gemv
  x, ids, w, experts = make_inputs(3, 2, 2, 4, 4, 256, 256, jnp.float32)
  with pytest.raises(ValueError, match="pair_splits 2 must be >= 1, and above 1 only with rows_per_run 1"):
    routed_experts_int4_gemv(x, ids, w, *experts, 0, interpret=True, block_k=128, sort_pairs=True, rows_per_run=2,
                             pair_splits=2)
  with pytest.raises(ValueError, match="prefetch 3 must be 0, 1 or 2"):
    routed_experts_int4_gemv(x, ids, w, *experts, 0, interpret=True, block_k=128, prefetch=3)
  with pytest.raises(ValueError, match="rank_in_kernel needs pairs in token order"):
    routed_experts_int4_gemv(x, ids, w, *experts, 0, interpret=True, block_k=128, pair_splits=1, rank_in_kernel=True)
  with pytest.raises(ValueError, match="block_k_down 96 must be a power of two"):
    routed_experts_int4_gemv(x, ids, w, *experts, 0, interpret=True, block_k=128, block_k_down=96)
  with pytest.raises(ValueError, match="num_warps_down 3 must be a power of two"):
    routed_experts_int4_gemv(x, ids, w, *experts, 0, interpret=True, block_k=128, num_warps_down=3)


@pytest.mark.parametrize("sort_pairs,rows_per_run", [(False, 1), (True, 1), (True, 2)])
def test_gemv_repeated_experts_no_local_expert_and_traced_offset(sort_pairs, rows_per_run):
  """A token routed twice to one expert counts twice, a token with no local expert gives an exact zero
  row (the down kernel writes every row), and the offset may be traced."""
  from custom_calls.moe_int4.pallas_gemv import routed_experts_int4_gemv
  ids = np.array([[4, 4, 1, 7], [0, 1, 2, 11], [6, 9, 9, 3]])   # token 1: nothing in [4, 10)
  x, ids, w, experts = make_inputs(13, 3, 4, 12, 6, 256, 256, jnp.float32, ids=ids)
  f = jax.jit(lambda off: routed_experts_int4_gemv(x, ids, w, *experts, off, block_k=128, sort_pairs=sort_pairs,
                                                   rows_per_run=rows_per_run, interpret=True))
  out = f(jnp.int32(4))
  assert rel_err(out, reference_f32(x, ids, w, experts, 4)) < 1e-5
  np.testing.assert_array_equal(np.asarray(out[1]), 0.0)


@pytest.mark.parametrize("n", [1, 2])
def test_gemv_nibble4_extraction_gives_the_same_bits(n):
  """Nibble 4 masked in place or from the shifted word, per kernel (x's and h's planes pre-scaled to match): the
  same float32 products, so the same bits, bf16 h included. n=1 and n=2 take the two defaults."""
  from custom_calls.moe_int4.pallas_gemv import default_nibble4_in_place, routed_experts_int4_gemv
  x, ids, w, experts = make_inputs(41 + n, n, 3, 12, 6, 512, 256, jnp.bfloat16)
  assert np.any((np.asarray(ids) >= 3) & (np.asarray(ids) < 9)), "the test needs local pairs (experts 3..8)"
  run = lambda flag: np.asarray(routed_experts_int4_gemv(x, ids, w, *experts, 3, interpret=True, block_k=128,
                                                         nibble4_in_place=flag).astype(jnp.float32))
  default = run(None)
  assert default_nibble4_in_place(n) == (n > 1,) * 2
  for flag in ((False, False), (True, False), (False, True), (True, True)):
    np.testing.assert_array_equal(run(flag), default)
  assert rel_err(default, reference_f32(x, ids, w, experts, 3)) < 1e-2
  with pytest.raises(ValueError, match=r"nibble4_in_place \(True,\) must be None, a bool or a \(gate/up, down\)"):
    routed_experts_int4_gemv(x, ids, w, *experts, 3, interpret=True, block_k=128, nibble4_in_place=(True,))


@pytest.mark.parametrize("chunk,opts", [(None, {}), (128, dict(sort_pairs=True, rows_per_run=2))])
def test_gemv_down_row_splits_agree(chunk, opts):
  """down_row_splits 2 (the down tile as two halves sharing the activation loads; the default at up to 8 tokens)
  against 1, in token order and sorted, stored and k-chunked (K step of two chunks): the same sums per row, reduced
  in another order in interpret mode, so equal to float32 rounding."""
  from custom_calls.moe_int4.k_chunks import experts_to_k_chunks
  from custom_calls.moe_int4.pallas_gemv import default_down_row_splits, routed_experts_int4_gemv
  assert [default_down_row_splits(n, bn) for n, bn in ((1, 8), (8, 8), (9, 8), (3, 4))] == [2, 2, 1, 1]
  x, ids, w, stored = make_inputs(83 + (chunk or 0), 3, 3, 12, 6, 512, 256, jnp.float32)
  assert np.any((np.asarray(ids) >= 3) & (np.asarray(ids) < 9)), "the test needs local pairs (experts 3..8)"
  experts = experts_to_k_chunks(stored, chunk) if chunk else stored
  run = lambda splits: routed_experts_int4_gemv(x, ids, w, *experts, 3, interpret=True, block_k=256,
                                                down_row_splits=splits, **opts)
  whole, halves = run(1), run(2)
  assert np.all(np.isfinite(np.asarray(halves))) and np.any(np.asarray(halves) != 0)
  assert rel_err(halves, whole) < 2e-6
  assert rel_err(halves, reference_f32(x, ids, w, stored, 3)) < 1e-5
  for bad in (3, 16, 0, True):                               # not a power of two, above block_n_down 8, a bool
    with pytest.raises(ValueError, match="down_row_splits .* must be a power of two dividing block_n_down 8"):
      routed_experts_int4_gemv(x, ids, w, *experts, 3, interpret=True, block_k=256, down_row_splits=bad)


def test_gemv_activation_planes():
  from custom_calls.moe_int4.nibbles import activation_planes
  x = jnp.asarray(np.random.default_rng(0).standard_normal((2, 64)), jnp.float32)
  xp = np.asarray(activation_planes(x))                                  # [2, 8, 8]
  xs = np.asarray(activation_planes(x, nibble4_in_place=False))
  for j, e in enumerate((0, 4, 8, 12, 16, 4, 8, 12)):                    # nibbles.PLANE_EXPONENTS, written out
    np.testing.assert_array_equal(xp[:, j, :], np.asarray(x)[:, j::8] * 2.0 ** -e)
    np.testing.assert_array_equal(xs[:, j, :], np.asarray(x)[:, j::8] * 2.0 ** -(0 if j == 4 else e))


@pytest.mark.parametrize("n", [2, 3, 4])
def test_gemv_defaults_skip_the_compaction_at_two_and_three_tokens(n):
  """Left to its defaults the gemv visits the pairs uncompacted at 2-3 tokens (default_uncompacted_pairs): one pair
  a gate/up program, no XLA sort before the kernels; the same bits as the compacted visits, which it keeps from 4
  tokens and whenever compact_pairs or pair_splits is given."""
  from custom_calls.moe_int4.pallas_gemv import default_uncompacted_pairs, routed_experts_int4_gemv
  x, ids, w, experts = make_inputs(70 + n, n, 8, 16, 6, 512, 256, jnp.float32)
  run = lambda **kw: routed_experts_int4_gemv(x, ids, w, *experts, 3, interpret=True, block_k=128, **kw)
  program = lambda **kw: str(jax.make_jaxpr(lambda: run(**kw))())
  defaults = program()
  assert default_uncompacted_pairs(n) == (n < 4)
  assert ("sort" in defaults) == (n >= 4)
  assert "sort" in program(compact_pairs=True) and "sort" in program(pair_splits=n)   # given options keep it
  # one pair a gate/up program at 2-3 tokens (N * top_k splits; N splits uncompacted is slower), N splits from 4
  gate_up_grid = re.findall(r"grid=\(([^)]*)\)", defaults)[0]
  assert gate_up_grid == f"{256 // 4}, {n * 8 if n < 4 else n}", gate_up_grid
  out = run()
  np.testing.assert_array_equal(np.asarray(out), np.asarray(run(compact_pairs=True)))
  assert rel_err(out, reference_f32(x, ids, w, experts, 3)) < 1e-5


@pytest.mark.parametrize("n,splits", [(3, 9), (3, 24)])     # strides over the 24 pairs; one pair a program
def test_gemv_uncompacted_pair_splits_give_the_same_bits(n, splits):
  """compact_pairs=False: the gate/up programs stride over all pairs (no XLA compaction) and skip the remote ones;
  the down kernel splits the tokens min(S, N) ways. The same sums as the compacted visits."""
  from custom_calls.moe_int4.pallas_gemv import routed_experts_int4_gemv
  x, ids, w, experts = make_inputs(61 + n, n, 8, 16, 6, 512, 256, jnp.float32)
  ids = ids.at[0, 1].set(ids[0, 0])                         # a token routed twice to one expert
  assert np.any((np.asarray(ids) >= 3) & (np.asarray(ids) < 9)), "the test needs local pairs (experts 3..8)"
  run = lambda compact: routed_experts_int4_gemv(x, ids, w, *experts, 3, interpret=True, block_k=128,
                                                 pair_splits=splits, compact_pairs=compact)
  uncompacted = run(False)
  np.testing.assert_array_equal(np.asarray(uncompacted), np.asarray(run(True)))
  assert "sort" in str(jax.make_jaxpr(lambda: run(True))()) and "sort" not in str(jax.make_jaxpr(lambda: run(False))())
  assert rel_err(uncompacted, reference_f32(x, ids, w, experts, 3)) < 1e-5
  with pytest.raises(ValueError, match="cannot be combined with compact_pairs=False"):
    routed_experts_int4_gemv(x, ids, w, *experts, 3, interpret=True, block_k=128, pair_splits=splits,
                             compact_pairs=False, rank_in_kernel=True)
