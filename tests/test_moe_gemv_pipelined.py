"""The few-token INT4 MoE in one launch (custom_calls/moe_int4/pallas_gemv_pipelined.py) against pallas_gemv and the
XLA reference: interpreted on the CPU at small shapes; compiled at the K2.6 shard's shapes on a GPU (marked)."""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from custom_calls.moe_int4 import GEMV_MAX_TOKENS, ONE_LAUNCH_MIN_TOKENS, routed_experts_int4
from custom_calls.moe_int4.k_chunks import experts_to_k_chunks
from custom_calls.moe_int4.pallas_gemv import routed_experts_int4_gemv
from custom_calls.moe_int4.pallas_gemv_pipelined import program_place, routed_experts_int4_gemv_pipelined
from tests.kernel_checks import rel_err
from tests.test_kernels_moe import check_one_launch_against_two, k26_shard_inputs, make_inputs, reference_f32


@pytest.mark.parametrize("tokens,g,d,lag", [(1, 3, 2, 1), (4, 3, 2, 1), (4, 3, 5, 2), (3, 2, 5, 3), (3, 2, 5, 7)])
def test_program_place_covers_every_program_once_with_down_after_its_gate_up(tokens, g, d, lag):
  """Each grid place is one (part, token, tile), every one is placed, and every down program of token t comes after
  all gate/up programs of token t (what makes its wait finite) and after those of token t + lag."""
  places = [tuple(int(v) for v in program_place(q, tokens=tokens, gate_up_programs=g, down_programs=d, lag=lag))
            for q in range(tokens * (g + d))]
  expected = {(1, t, j) for t in range(tokens) for j in range(g)} | {(0, t, j) for t in range(tokens) for j in range(d)}
  assert len(set(places)) == len(places) and set(places) == expected
  where = {p: q for q, p in enumerate(places)}
  for t, jd, jg in itertools.product(range(tokens), range(d), range(g)):
    assert where[(0, t, jd)] > where[(1, t, jg)]
    if t + lag < tokens:
      assert where[(0, t, jd)] > where[(1, t + lag, jg)]
  # the exact order: D(t) right after G(t + L) while there is one, then each D(t) right after D(t - 1) (D(0) right
  # after the last G when L >= N)
  for t in range(tokens):
    before = (1, t + lag, g - 1) if t + lag < tokens else (0, t - 1, d - 1) if t > 0 else (1, tokens - 1, g - 1)
    assert where[(0, t, 0)] == where[before] + 1, (t, before)


@pytest.mark.parametrize("n,dtype,chunk,opts", [
    (5, jnp.float32, None, {}),                                   # lag N: every gate/up program first
    (4, jnp.float32, 64, dict(block_k=256, lag=1)),               # k-chunked; D(t) right after G(t + 1)
    (3, jnp.bfloat16, None, dict(lag=2, ticket=True)),            # the ticket path (interpreted: the grid order)
    (4, jnp.float32, None, dict(lag=1, wait_flags=4)),            # flags set by each token's last gate/up program
])
def test_same_bits_as_two_launches_and_matches_reference(n, dtype, chunk, opts):
  """The same tile sums as pallas_gemv (token order) in another program order: bit for bit, bf16 h included."""
  x, ids, w, stored = make_inputs(51 + n, n, 4, 12, 6, 512, 256, dtype)
  ids = ids.at[0, 1].set(ids[0, 0])                         # a token routed twice to one expert
  assert np.any((np.asarray(ids) >= 3) & (np.asarray(ids) < 9)), "the test needs local pairs (experts 3..8)"
  experts = experts_to_k_chunks(stored, chunk) if chunk else stored
  opts = dict(opts)                                         # (the parametrize dict is shared between reruns)
  block_k = opts.pop("block_k", 128)
  out = routed_experts_int4_gemv_pipelined(x, ids, w, *experts, 3, block_k=block_k, interpret=True, **opts)
  two_launches = routed_experts_int4_gemv(x, ids, w, *experts, 3, block_k=block_k, interpret=True)
  assert out.shape == x.shape and out.dtype == dtype
  np.testing.assert_array_equal(np.asarray(out.astype(jnp.float32)), np.asarray(two_launches.astype(jnp.float32)))
  assert rel_err(out, reference_f32(x, ids, w, stored, 3)) < (1e-5 if dtype == jnp.float32 else 1e-2)


def test_dispatch_runs_it_from_one_launch_min_tokens_with_a_traced_offset():
  """routed_experts_int4 at ONE_LAUNCH_MIN_TOKENS..GEMV_MAX_TOKENS tokens runs this kernel: a token with no local
  expert gives an exact zero row, a repeated expert counts twice, and the offset may be traced."""
  n = ONE_LAUNCH_MIN_TOKENS
  assert n <= GEMV_MAX_TOKENS
  ids = np.array([[4, 4, 1, 7], [0, 1, 2, 11], [6, 9, 9, 3], [5, 8, 10, 0]])[:n]   # token 1: nothing in [4, 10)
  x, ids, w, experts = make_inputs(61, n, 4, 12, 6, 256, 256, jnp.float32, ids=ids)
  f = jax.jit(lambda off: routed_experts_int4(x, ids, w, *experts, expert_offset=off, impl="pallas_interpret"))
  assert "moe_int4_gemv_pipelined" in str(jax.make_jaxpr(f)(jnp.int32(4)))
  out = f(jnp.int32(4))
  assert rel_err(out, reference_f32(x, ids, w, experts, 4)) < 1e-5
  np.testing.assert_array_equal(np.asarray(out[1]), 0.0)
  name_in = lambda m: "moe_int4_gemv_pipelined" in str(jax.make_jaxpr(
      lambda: routed_experts_int4(x[:1].repeat(m, 0), ids[:1].repeat(m, 0), w[:1].repeat(m, 0), *experts,
                                  impl="pallas_interpret"))())
  assert name_in(GEMV_MAX_TOKENS) and not name_in(GEMV_MAX_TOKENS + 1)   # above: the grouped kernels
  # below ONE_LAUNCH_MIN_TOKENS: pallas_gemv's two launches
  few = lambda: routed_experts_int4(x[:n - 1], ids[:n - 1], w[:n - 1], *experts, impl="pallas_interpret")
  assert "moe_int4_gemv_pipelined" not in str(jax.make_jaxpr(few)())


def test_rejects_bad_options():
  x, ids, w, experts = make_inputs(3, 2, 2, 4, 4, 256, 256, jnp.float32)
  run = lambda **kw: routed_experts_int4_gemv_pipelined(x, ids, w, *experts, 0, interpret=True, block_k=128, **kw)
  for bad in (0, True, 1.5):
    with pytest.raises(ValueError, match=f"lag {bad!r} must be an int >= 1"):
      run(lag=bad)
  with pytest.raises(ValueError, match="down_row_splits 3 must be a power of two dividing block_n_down 8"):
    run(down_row_splits=3)
  with pytest.raises(ValueError, match="prefetch 3 must be 0, 1 or 2"):
    run(prefetch=3)
  with pytest.raises(ValueError, match="block_n 3 must divide I = 256"):
    run(block_n=3)
  for bad in (-1, 2.5, True, 2_000_000):
    with pytest.raises(ValueError, match=f"routed_experts_int4_gemv_pipelined: wait_sleep_ns {bad!r} must be an int"):
      run(wait_sleep_ns=bad)
  for bad in (-1, 2.5, True, 3, 512):
    with pytest.raises(ValueError, match=f"routed_experts_int4_gemv_pipelined: wait_flags {bad!r} must be 0 or a"):
      run(wait_flags=bad)


@pytest.mark.gpu
@pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a GPU backend (jax.default_backend() == 'gpu')")
# New cases go last, so that the ids the round scripts in benchmarks/results name (e.g. [6-256-opts9]) stay put.
@pytest.mark.parametrize("n,chunk,opts", [(4, 256, {}), (8, 256, {}), (6, None, {}), (6, 256, dict(lag=1)),
                                          (6, 256, dict(lag=1, ticket=True)), (1, 256, dict(wait_sleep_ns=200)),
                                          (6, 256, dict(wait_sleep_ns=200)), (3, 256, dict(wait_sleep_ns=1000)),
                                          (4, 256, dict(wait_flags=16)), (6, 256, dict(lag=1, wait_flags=64)),
                                          (3, 256, {}), (2, 256, {})])
def test_gpu_kernel(n, chunk, opts):
  """Compiled at the K2.6 shard's shapes (the counters' waits really run; at lag 1 the down programs wait on
  gate/up programs still running): against the XLA reference and, bit for bit, pallas_gemv's two launches. Twice in
  one program (check_one_launch_against_two), so that each call's counters must start at 0 (with the ticket, a
  counter left over from the first call would send the second call's programs past the grid)."""
  x, ids, w, stored = k26_shard_inputs(100 + n, n)
  experts = experts_to_k_chunks(stored, chunk) if chunk else stored
  call = lambda xx: routed_experts_int4_gemv_pipelined(xx, ids, w, *experts, 0, **opts)
  two_launches = lambda xx: routed_experts_int4_gemv(xx, ids, w, *experts, 0)
  check_one_launch_against_two(call, two_launches, x, ids, w, stored)
