"""trigger_dependents (custom_calls/dependent_launch.py) changes only when the next kernel may be placed, never what
is computed: on a GPU, the MLA attention kernels (Triton and Mosaic) and the gemv's gate/up kernel give the same bits
with and without it. The CPU side (one `griddepcontrol.launch_dependents` before the first load, none in the
following kernel) is in tests/test_kernels_lowering.py
(test_trigger_dependents_issues_launch_dependents_before_every_load and
test_mosaic_mla_trigger_dependents_issues_launch_dependents); interpreted, nothing is issued."""
import jax
import numpy as np
import pytest

from custom_calls.mla_attention.mosaic_gpu import mla_attention_mosaic
from custom_calls.mla_attention.pallas_triton import mla_attention_pallas
from custom_calls.moe_int4.pallas_gemv import routed_experts_int4_gemv
from tests.test_kernels_mla import SCALE
from tests.test_kernels_mla import make_inputs as mla_inputs
from tests.test_kernels_moe import k26_shard_inputs

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(jax.default_backend() != "gpu",
                                                  reason="needs a GPU backend (jax.default_backend() == 'gpu')")]


@pytest.mark.parametrize("b,t,h,s", [(1, 1, 8, 8192), (1, 1, 8, 32768), (1, 4, 8, 16384)])
def test_mla_kernel_same_bits_with_the_trigger(b, t, h, s):
  args = mla_inputs(31 + t, b, t, h, s, 512, 64, jax.numpy.bfloat16)
  plain = mla_attention_pallas(*args, scale=SCALE)
  triggered = mla_attention_pallas(*args, scale=SCALE, trigger_dependents=True)
  np.testing.assert_array_equal(np.asarray(triggered), np.asarray(plain))


@pytest.mark.parametrize("s", [4096, 32768])
def test_mosaic_mla_kernel_same_bits_with_the_trigger(s):
  args = mla_inputs(37, 1, 1, 64, s, 512, 64, jax.numpy.bfloat16)
  plain = mla_attention_mosaic(*args, scale=SCALE)
  triggered = mla_attention_mosaic(*args, scale=SCALE, trigger_dependents=True)
  np.testing.assert_array_equal(np.asarray(triggered), np.asarray(plain))


@pytest.mark.parametrize("n", [1, 2])
def test_gemv_same_bits_with_the_trigger(n):
  x, ids, w, experts = k26_shard_inputs(n, n)
  plain = routed_experts_int4_gemv(x, ids, w, *experts, 0)
  triggered = routed_experts_int4_gemv(x, ids, w, *experts, 0, trigger_dependents=True)
  np.testing.assert_array_equal(np.asarray(triggered), np.asarray(plain))
