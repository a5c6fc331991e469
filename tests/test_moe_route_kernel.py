"""custom_calls/moe_int4/route_kernel.py: the grouped MoE kernels' routing in one launch equals XLA's `route`, bit
for bit, under the Pallas interpreter (and on the GPU, marked); the grouped kernels give the same output with
either routing."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from custom_calls.moe_int4.pallas_triton import route, routed_experts_int4_pallas
from custom_calls.moe_int4.route_kernel import MAX_PAIRS, padded_pairs, route_pallas
from tests.test_kernels_moe import make_inputs

NAMES = ("row_token", "pos", "block_valid", "block_expert")


def xla_route(ids, e_local, offset, block_m):
  row_token, pos, _, block_valid, block_expert = route(ids, e_local, offset, block_m, by_rank=False)
  return row_token, pos, block_valid, block_expert


@pytest.mark.parametrize("n,k,e_local,offset,block_m", [
    (1, 8, 48, 0, 16),          # one decode token, K2.6's shard
    (8, 8, 48, 96, 16),         # 64 pairs: P is a power of two, most pairs remote
    (16, 8, 48, 48, 16),        # MAX_PAIRS pairs
    (3, 4, 6, 3, 16),           # P = 12 and E = 6: neither a power of two
    (5, 3, 4, 0, 32),           # block_m 32
    (7, 2, 5, 1, 4),            # small blocks: several row blocks per expert
])
def test_route_kernel_equals_xla_route(n, k, e_local, offset, block_m):
  rng = np.random.default_rng(n * 100 + k)
  ids = jnp.asarray(rng.integers(0, offset + e_local + 7, size=(n, k)), jnp.int32)   # repeats, remote, local
  got = route_pallas(ids, offset, num_local=e_local, block_m=block_m, interpret=True)
  want = xla_route(ids, e_local, offset, block_m)
  assert got[0].shape == (padded_pairs(n * k, e_local, block_m),)
  for name, a, b in zip(NAMES, got, want):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=name)


def test_route_kernel_traced_offset_and_no_local_pair():
  ids = jnp.asarray([[0, 11, 11], [4, 9, 4], [2, 2, 3]], jnp.int32)
  f = jax.jit(lambda off: route_pallas(ids, off, num_local=6, block_m=4, interpret=True))
  for off in (4, 20):                                     # 20: no pair is local, every block invalid
    got = f(jnp.int32(off))
    for name, a, b in zip(NAMES, got, xla_route(ids, 6, off, 4)):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=f"offset {off}: {name}")
  assert int(np.asarray(f(jnp.int32(20))[2]).sum()) == 0


def test_route_kernel_rejects_too_many_pairs():
  ids = jnp.zeros((MAX_PAIRS // 8 + 1, 8), jnp.int32)
  with pytest.raises(ValueError, match=f"at most {MAX_PAIRS}"):
    route_pallas(ids, 0, num_local=48, block_m=16, interpret=True)


def test_grouped_kernel_same_output_with_either_routing():
  x, ids, w, experts = make_inputs(31, 5, 4, 12, 6, 256, 256, jnp.float32)
  outs = [routed_experts_int4_pallas(x, ids, w, *experts, 3, block_k=128, route_in_kernel=flag, interpret=True)
          for flag in (True, False)]
  np.testing.assert_array_equal(np.asarray(outs[0]), np.asarray(outs[1]))


@pytest.mark.gpu
@pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a GPU backend (jax.default_backend() == 'gpu')")
@pytest.mark.parametrize("n", [1, 8, 16])
def test_gpu_route_kernel(n):
  rng = np.random.default_rng(n)
  ids = jnp.asarray(rng.integers(0, 384, size=(n, 8)), jnp.int32)
  got = route_pallas(ids, 48, num_local=48, block_m=16)
  for name, a, b in zip(NAMES, got, xla_route(ids, 48, 48, 16)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=name)
