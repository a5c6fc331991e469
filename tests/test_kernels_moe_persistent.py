"""The persistent few-token INT4 MoE kernel (pallas_persistent.py) and the gemv reading x as given.

On the CPU the persistent kernel's two phases run under the Pallas interpreter as two launches (a barrier cannot be
met by programs that run one after another); they must give pallas_gemv's bits. The single launch with its
grid-wide barrier runs on a GPU only (`gpu` mark): the K2.6 shard against the fp32 reference, and a grid too large
to be resident at once, whose barrier must give up and poison the output instead of hanging.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from custom_calls.moe_int4.k_chunks import experts_to_k_chunks
from custom_calls.moe_int4.pallas_gemv import routed_experts_int4_gemv
from custom_calls.moe_int4.pallas_persistent import routed_experts_int4_persistent
from custom_calls.random_inputs import random_int4_experts
from tests.kernel_checks import rel_err
from tests.test_kernels_moe import make_inputs, reference_f32


@pytest.mark.parametrize("n,dtype,chunk,opts", [
    (1, jnp.float32, None, dict(num_programs=7)),                          # one token; 8 gate/up items
    (3, jnp.bfloat16, 64, dict(num_programs=5, block_n=16, block_n_down=16)),   # k-chunked, 3 tokens
])
def test_persistent_phases_give_the_gemv_bits(n, dtype, chunk, opts):
  """Items p, p + G, ... of (tile, token) per program: every h tile and output tile once, as the gemv sums them.
  Token 0 is routed twice to one local expert; the last token has no local expert (its row must be zero)."""
  x, ids, w, stored = make_inputs(40 + n, n, 4, 12, 6, 512, 256, dtype)
  ids = ids.at[0, 1].set(4).at[0, 2].set(4)                  # local experts are 3..8
  ids = ids.at[n - 1].set(jnp.asarray([0, 1, 9, 11])) if n > 1 else ids
  experts = experts_to_k_chunks(stored, chunk) if chunk else stored
  out = routed_experts_int4_persistent(x, ids, w, *experts, 3, block_k=128, interpret=True, **opts)
  gemv = routed_experts_int4_gemv(x, ids, w, *experts, 3, block_k=128, interpret=True,
                                  block_n=opts.get("block_n"), block_n_down=opts.get("block_n_down"))
  np.testing.assert_array_equal(np.asarray(out), np.asarray(gemv))
  assert rel_err(out, reference_f32(x, ids, w, stored, 3)) < (1e-5 if dtype == jnp.float32 else 1e-2)
  if n > 1:
    np.testing.assert_array_equal(np.asarray(out[n - 1]), 0.0)


@pytest.mark.parametrize("n,opts", [(1, {}), (4, dict(pair_splits=2))])
def test_gemv_planes_in_kernel_gives_the_same_bits(n, opts):
  """The gate/up kernel making the activation planes from x in registers: the same values as XLA's planes."""
  x, ids, w, experts = make_inputs(50 + n, n, 3, 12, 6, 512, 256, jnp.bfloat16)
  run = lambda planes: routed_experts_int4_gemv(x, ids, w, *experts, 3, block_k=128, interpret=True,
                                                planes_in_kernel=planes, **opts)
  np.testing.assert_array_equal(np.asarray(run(True)), np.asarray(run(False)))


def test_persistent_rejects_bad_options():
  x, ids, w, experts = make_inputs(3, 9, 2, 4, 4, 256, 256, jnp.float32)
  with pytest.raises(ValueError, match="9 tokens; this kernel takes at most 8"):
    routed_experts_int4_persistent(x, ids, w, *experts, 0, block_k=128, interpret=True)
  with pytest.raises(ValueError, match="block_n_down 24 must divide D = 256"):
    routed_experts_int4_persistent(x[:2], ids[:2], w[:2], *experts, 0, block_k=128, block_n_down=24, interpret=True)


def k26_inputs(n, seed):
  e, d, inter = 48, 7168, 2048
  ks = jax.random.split(jax.random.PRNGKey(seed), 8)
  stored = random_int4_experts(ks[:6], e, d, inter)
  x = jax.random.normal(ks[6], (n, d), jnp.bfloat16)
  ids = jax.random.randint(ks[7], (n, 8), 0, 96)      # about 4 of a token's 8 pairs local (experts 0..47)
  w = jax.random.uniform(ks[7], (n, 8))
  return x, ids, w, stored


@pytest.mark.gpu
@pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a GPU backend (jax.default_backend() == 'gpu')")
@pytest.mark.parametrize("n", [1, 2, 4])
def test_gpu_persistent_kernel(n):
  """One launch with its barrier at the K2.6 shard (k-chunked, as the engine lays the experts out on a GPU)."""
  x, ids, w, stored = k26_inputs(n, 100 + n)
  ref = reference_f32(x, ids, w, stored, 0)
  experts = experts_to_k_chunks(stored, 256)
  assert rel_err(routed_experts_int4_persistent(x, ids, w, *experts, 0), ref) < 1e-2
  assert rel_err(routed_experts_int4_gemv(x, ids, w, *experts, 0, planes_in_kernel=True), ref) < 1e-2


@pytest.mark.gpu
@pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a GPU backend (jax.default_backend() == 'gpu')")
def test_gpu_persistent_grid_too_large_gives_nan_not_a_hang():
  """64 programs an SM of 4 warps cannot all be resident: the first ones give up polling and write NaN."""
  from custom_calls.moe_int4.pallas_persistent import sm_count
  x, ids, w, stored = k26_inputs(1, 7)
  out = routed_experts_int4_persistent(x, ids, w, *experts_to_k_chunks(stored, 256), 0,
                                       num_programs=64 * sm_count(), spin_limit=1000)
  assert np.isnan(np.asarray(out, np.float32)).any()
