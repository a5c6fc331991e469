"""The k-chunked expert layout (custom_calls/moe_int4/k_chunks.py): a pure reordering, so the kernels must give the
same bits in both layouts (the gemv with a K step of several chunks: the same values up to float32 summation
order), and the dispatch's XLA path must read it too."""
import jax.numpy as jnp
import numpy as np
import pytest

from custom_calls.moe_int4 import routed_experts_int4
from custom_calls.moe_int4.k_chunks import check_block_k, experts_to_k_chunks, from_k_chunks, logical_shape, to_k_chunks
from custom_calls.moe_int4.layout import dequantize_int4
from custom_calls.moe_int4.pallas_gemv import routed_experts_int4_gemv
from custom_calls.moe_int4 import pallas_triton
from custom_calls.moe_int4.pallas_triton import routed_experts_int4_pallas
from tests.test_kernels_moe import make_inputs, reference_f32, rel_err


def test_round_trip_and_tile_contents():
  rng = np.random.default_rng(0)
  packed = jnp.asarray(rng.integers(-2**31, 2**31, (3, 16, 64), dtype=np.int64).astype(np.int32))   # K = 512
  scale = jnp.asarray(rng.random((3, 16, 16)) + 0.5, jnp.bfloat16)
  words, scales = to_k_chunks(packed, scale, 128)
  assert words.shape == (3, 4, 16, 16) and scales.shape == (3, 4, 16, 4)
  assert logical_shape(words) == (3, 16, 64)
  # chunk c, row n holds inputs [128c, 128c + 128) of row n: words [16c, 16c + 16), groups [4c, 4c + 4)
  np.testing.assert_array_equal(np.asarray(words[1, 2, 5]), np.asarray(packed[1, 5, 32:48]))
  np.testing.assert_array_equal(np.asarray(scales[2, 3, 7], np.float32), np.asarray(scale[2, 7, 12:16], np.float32))
  back_w, back_s = from_k_chunks(words, scales)
  np.testing.assert_array_equal(np.asarray(back_w), np.asarray(packed))
  np.testing.assert_array_equal(np.asarray(dequantize_int4(back_w, back_s)), np.asarray(dequantize_int4(packed, scale)))


def test_bad_chunk_and_block_k_are_named():
  packed = jnp.zeros((2, 8, 32), jnp.int32)
  scale = jnp.ones((2, 8, 8), jnp.bfloat16)
  with pytest.raises(ValueError, match="chunk 48 must be a multiple of 8 and of group_size 32"):
    to_k_chunks(packed, scale, 48)
  with pytest.raises(ValueError, match=r"scale has shape \(2, 8, 4\), expected \(2, 8, 8\)"):
    to_k_chunks(packed, scale[..., :4], 128)
  x, ids, w, experts = make_inputs(1, 3, 2, 4, 4, 256, 256, jnp.bfloat16)
  with pytest.raises(ValueError, match="block_k 256 must divide the k-chunk size 128 \\(k-chunked"):
    routed_experts_int4_pallas(x, ids, w, *experts_to_k_chunks(experts, 128), 0, block_k=256, interpret=True)
  with pytest.raises(ValueError, match="block_k 96 must divide the k-chunk size 64 or be a multiple of it"):
    check_block_k("gemv", experts_to_k_chunks(experts, 64)[0], 96, multiples=True)
  check_block_k("gemv", experts_to_k_chunks(experts, 64)[0], 128, multiples=True)          # two chunks per K step: fine
  with pytest.raises(ValueError, match="block_k_down 256 must divide the k-chunk size 128"):
    routed_experts_int4_pallas(x, ids, w, *experts[:4], *to_k_chunks(experts[4], experts[5], 128), 0,
                               block_k=128, block_k_down=256, interpret=True)
  mixed = list(experts_to_k_chunks(experts, 128))
  mixed[2] = experts[2]                                  # up words stored, gate words k-chunked
  with pytest.raises(ValueError, match="up_packed .* and gate_packed .* must have one shape"):
    routed_experts_int4_gemv(x, ids, w, *mixed, 0, block_k=128, interpret=True)
  with pytest.raises(ValueError, match="down_scale has shape"):          # the XLA path checks the pairs too
    routed_experts_int4(x, ids, w, *experts_to_k_chunks(experts, 128)[:5], experts[5], impl="xla")
  # chunks the grouped kernel's default K step (256 or 128 inputs) cannot tile: the dispatch falls back
  c128, c64 = experts_to_k_chunks(experts, 128), experts_to_k_chunks(experts, 64)
  assert pallas_triton.supported(x, c128[0], c128[4], 32)
  assert not pallas_triton.supported(x, c64[0], c64[4], 32)
  bad = list(experts_to_k_chunks(experts, 128))
  bad[1] = experts[1]                                    # gate scales left in the stored layout
  with pytest.raises(ValueError, match="gate_scale has shape"):
    routed_experts_int4_pallas(x, ids, w, *bad, 0, block_k=128, interpret=True)


@pytest.mark.parametrize("dtype,opts,chunk", [
    (jnp.bfloat16, dict(planar=True, block_k=128, block_n=32), 128),                 # bf16 planes, tile = chunk
    (jnp.bfloat16, dict(planar=True, block_k=128, block_n=32, block_n_down=64, num_warps_down=8), 256),  # 2 per chunk
    (jnp.float32, dict(block_m=16, block_n=32, block_k=64), 128),                    # reshape dequant, f32
])
def test_grouped_kernel_same_bits_in_both_layouts(dtype, opts, chunk):
  x, ids, w, experts = make_inputs(7, 9, 3, 12, 6, 256, 256, dtype)
  stored = routed_experts_int4_pallas(x, ids, w, *experts, 2, interpret=True, **opts)
  out = routed_experts_int4_pallas(x, ids, w, *experts_to_k_chunks(experts, chunk), 2, interpret=True, **opts)
  np.testing.assert_array_equal(np.asarray(out, np.float32), np.asarray(stored, np.float32))
  assert rel_err(np.asarray(out, np.float32), reference_f32(x, ids, w, experts, 2)) < (1e-5 if dtype == jnp.float32
                                                                                       else 1e-2)


@pytest.mark.parametrize("opts,chunk,dtype", [
    (dict(block_k=128), 256, jnp.bfloat16),                              # K step inside a chunk: [BN, BK/8] tiles
    (dict(block_k=256), 64, jnp.float32),                                # 4 chunks per K step: [4, BN, 8] tiles
    (dict(block_k=256, sort_pairs=True, rows_per_run=2), 128, jnp.float32),   # sorted runs on [2, BN, 16] tiles
])
def test_gemv_kernel_same_values_in_both_layouts(opts, chunk, dtype):
  x, ids, w, experts = make_inputs(8, 4, 3, 12, 6, 512, 256, dtype)
  stored = np.asarray(routed_experts_int4_gemv(x, ids, w, *experts, 3, interpret=True, **opts), np.float32)
  out = np.asarray(routed_experts_int4_gemv(x, ids, w, *experts_to_k_chunks(experts, chunk), 3, interpret=True, **opts),
                   np.float32)
  if opts["block_k"] <= chunk:                           # one chunk per K step: the same sums in the same order
    np.testing.assert_array_equal(out, stored)
  else:                                                  # [NC, BN, C/8] tiles are summed in another order
    assert rel_err(out, stored) < 1e-6
  assert rel_err(out, reference_f32(x, ids, w, experts, 3)) < (1e-5 if dtype == jnp.float32 else 1e-2)


def test_dispatch_reads_k_chunks():
  """The XLA path (and impl auto off the GPU) converts back; the interpreted kernels read the chunks directly
  (the gemv's K step of min(1024, D, I) = 256 inputs is 2 chunks of 128)."""
  x, ids, w, experts = make_inputs(9, 3, 4, 12, 6, 512, 256, jnp.float32)
  ref = routed_experts_int4(x, ids, w, *experts, expert_offset=1, impl="xla")
  ck = experts_to_k_chunks(experts, 128)
  np.testing.assert_array_equal(np.asarray(routed_experts_int4(x, ids, w, *ck, expert_offset=1, impl="xla")),
                                np.asarray(ref))
  np.testing.assert_array_equal(np.asarray(routed_experts_int4(x, ids, w, *ck, expert_offset=1)), np.asarray(ref))
  out = routed_experts_int4(x, ids, w, *ck, expert_offset=1, impl="pallas_interpret")     # 3 tokens: the gemv
  assert rel_err(out, ref) < 1e-5
  # 9 tokens: the grouped kernels (in one launch) with their k-chunk defaults (block_k = the chunk, 128 here)
  x, ids, w, experts = make_inputs(10, 9, 4, 12, 6, 512, 256, jnp.float32)
  out = routed_experts_int4(x, ids, w, *experts_to_k_chunks(experts, 128), expert_offset=1, impl="pallas_interpret")
  assert rel_err(out, routed_experts_int4(x, ids, w, *experts, expert_offset=1, impl="xla")) < 1e-5
