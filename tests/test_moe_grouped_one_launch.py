"""The grouped INT4 MoE in one launch (custom_calls/moe_int4/pallas_triton_pipelined.py) against the grouped kernels'
two launches (pallas_triton.py) and the XLA reference: interpreted on the CPU at small shapes; compiled at the K2.6
shard's shapes on a GPU (marked)."""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from custom_calls.moe_int4 import GEMV_MAX_TOKENS, GROUPED_ONE_LAUNCH_MAX_TOKENS, routed_experts_int4
from custom_calls.moe_int4.k_chunks import experts_to_k_chunks
from custom_calls.moe_int4.pallas_triton import routed_experts_int4_pallas
from custom_calls.moe_int4.pallas_triton_pipelined import program_place, routed_experts_int4_grouped_one_launch
from tests.kernel_checks import rel_err
from tests.test_kernels_moe import check_one_launch_against_two, k26_shard_inputs, make_inputs, reference_f32


@pytest.mark.parametrize("blocks,g,dn", [(1, 3, 2), (4, 3, 5), (3, 1, 1)])
def test_program_place_covers_every_program_once_with_down_after_its_gate_up(blocks, g, dn):
  """Each grid place is one (part, row block, tile), every one is placed, and every down program of block b comes
  after all gate/up programs (what makes its wait finite)."""
  places = [tuple(int(v) for v in program_place(q, blocks=blocks, gate_up_programs=g, down_programs=dn))
            for q in range(blocks * (g + dn))]
  expected = ({(1, b, j) for b in range(blocks) for j in range(g)}
              | {(0, b, j) for b in range(blocks) for j in range(dn)})
  assert len(set(places)) == len(places) and set(places) == expected
  where = {p: q for q, p in enumerate(places)}
  for b, jd, b2, jg in itertools.product(range(blocks), range(dn), range(blocks), range(g)):
    assert where[(0, b, jd)] > where[(1, b2, jg)]
  assert places[:g] == [(1, 0, j) for j in range(g)] and places[-1] == (0, blocks - 1, dn - 1)


@pytest.mark.parametrize("n,dtype,chunk,opts", [
    (10, jnp.float32, None, dict(block_k=128)),                      # stored layout, float32 (not planar)
    (12, jnp.bfloat16, 128, dict(block_n=64, block_n_down=128)),     # k-chunked, bf16 planes (exact_bf16)
])
def test_same_bits_as_two_launches_and_matches_reference(n, dtype, chunk, opts):
  """The same tiles as pallas_triton's two kernels in one grid: bit for bit (bf16 h included), and the reference.
  The routing has an expert that several tokens share (a row block of several rows), a token routed twice to one
  expert, and a token with no local expert (an exact zero row)."""
  rng = np.random.default_rng(70 + n)
  ids = np.stack([rng.choice(12, 4, replace=False) for _ in range(n)])
  ids[0, 1] = ids[0, 0]                                      # token 0: the same expert twice
  ids[1] = [0, 1, 2, 11]                                     # token 1: nothing local (experts 3..8)
  ids[2:, 0] = 5                                             # expert 5 (local 2) for every later token
  x, ids, w, stored = make_inputs(71 + n, n, 4, 12, 6, 512, 256, dtype, ids=ids)
  experts = experts_to_k_chunks(stored, chunk) if chunk else stored
  out = routed_experts_int4_grouped_one_launch(x, ids, w, *experts, 3, interpret=True, **opts)
  two_launches = routed_experts_int4_pallas(x, ids, w, *experts, 3, interpret=True, **opts)
  assert out.shape == x.shape and out.dtype == dtype
  np.testing.assert_array_equal(np.asarray(out.astype(jnp.float32)), np.asarray(two_launches.astype(jnp.float32)))
  np.testing.assert_array_equal(np.asarray(out[1].astype(jnp.float32)), 0.0)
  assert rel_err(out, reference_f32(x, ids, w, stored, 3)) < (1e-5 if dtype == jnp.float32 else 1e-2)


def test_dispatch_runs_it_above_the_gemv_up_to_its_bound():
  """routed_experts_int4 runs this kernel from GEMV_MAX_TOKENS + 1 to GROUPED_ONE_LAUNCH_MAX_TOKENS tokens (at the
  first, against the reference), the grouped kernels' two launches above, the gemv at GEMV_MAX_TOKENS."""
  n = GEMV_MAX_TOKENS + 1
  x, ids, w, experts = make_inputs(81, n, 4, 12, 6, 256, 256, jnp.float32)
  f = jax.jit(lambda off: routed_experts_int4(x, ids, w, *experts, expert_offset=off, impl="pallas_interpret"))
  assert "moe_int4_grouped_one_launch" in str(jax.make_jaxpr(f)(jnp.int32(3)))
  assert rel_err(f(jnp.int32(3)), reference_f32(x, ids, w, experts, 3)) < 1e-5

  def kernels_at(m):
    jaxpr = str(jax.make_jaxpr(lambda: routed_experts_int4(
        x[:1].repeat(m, 0), ids[:1].repeat(m, 0), w[:1].repeat(m, 0), *experts, impl="pallas_interpret"))())
    return {k for k in ("moe_int4_grouped_one_launch", "moe_int4_gate_up", "moe_int4_gemv") if k in jaxpr}
  assert kernels_at(GROUPED_ONE_LAUNCH_MAX_TOKENS) == {"moe_int4_grouped_one_launch"}
  assert kernels_at(GROUPED_ONE_LAUNCH_MAX_TOKENS + 1) == {"moe_int4_gate_up"}
  assert kernels_at(GEMV_MAX_TOKENS) == {"moe_int4_gemv"}                   # (a prefix of moe_int4_gemv_pipelined)


def test_rejects_bad_options_naming_itself():
  x, ids, w, experts = make_inputs(3, 2, 2, 4, 4, 256, 256, jnp.float32)
  with pytest.raises(ValueError, match="routed_experts_int4_grouped_one_launch: I = 256 is not a multiple of block 96"):
    routed_experts_int4_grouped_one_launch(x, ids, w, *experts, 0, interpret=True, block_k=128, block_n=96)
  for bad in (-1, 2.5, True, 2_000_000):
    with pytest.raises(ValueError, match=f"routed_experts_int4_grouped_one_launch: wait_sleep_ns {bad!r} must be an"):
      routed_experts_int4_grouped_one_launch(x, ids, w, *experts, 0, interpret=True, block_k=128, wait_sleep_ns=bad)


def test_sleeping_wait_gives_the_same_bits_interpreted():
  """wait_sleep_ns only changes how a down program polls on a GPU; interpreted (grid order, every wait met) the
  result is the same bits."""
  x, ids, w, experts = make_inputs(5, 8, 4, 12, 6, 256, 256, jnp.float32)
  run = lambda **kw: routed_experts_int4_grouped_one_launch(x, ids, w, *experts, 3, interpret=True, block_k=128, **kw)
  np.testing.assert_array_equal(np.asarray(run(wait_sleep_ns=500)), np.asarray(run()))


@pytest.mark.gpu
@pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a GPU backend (jax.default_backend() == 'gpu')")
@pytest.mark.parametrize("n,chunk,opts", [(10, 256, {}), (16, 256, {}), (12, None, {}),
                                          (10, 256, dict(wait_sleep_ns=200)), (7, 256, dict(wait_sleep_ns=1000))])
def test_gpu_kernel(n, chunk, opts):
  """Compiled at the K2.6 shard's shapes (the counters' waits really run): against the XLA reference and, bit for
  bit, the two launches of pallas_triton.py. Twice in one program, so that the constants array the kernel updates
  in place is a compile-time constant: XLA must give each call its own copy (a counter left over from the first
  call would let the second call's down programs read h before it is written)."""
  x, ids, w, stored = k26_shard_inputs(200 + n, n)
  experts = experts_to_k_chunks(stored, chunk) if chunk else stored
  call = lambda xx: routed_experts_int4_grouped_one_launch(xx, ids, w, *experts, 0, **opts)
  two_launches = lambda xx: routed_experts_int4_pallas(xx, ids, w, *experts, 0)
  check_one_launch_against_two(call, two_launches, x, ids, w, stored)
