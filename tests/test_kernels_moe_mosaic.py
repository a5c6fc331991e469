"""INT4 routed experts on tensor cores for up to 16 tokens (Pallas Mosaic GPU, mosaic_experts.py) against the XLA
reference.

On the CPU the kernels run under Mosaic GPU interpret mode (race detector on) at small shapes, and are lowered for
CUDA against an abstract H200 at the K2.6 per-GPU shard (Mosaic builds the kernel's code at lowering time: the
layouts, the int4 loads and conversions, the wgmma shapes; it is not compiled by ptxas nor run). The tests marked
gpu compile and run them.
"""
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src.pallas.mosaic_gpu.interpret import gpu_callbacks  # private: race detector state

from custom_calls.moe_int4.layout import pack_int4, quantize_int4, unpack_int4
from custom_calls.moe_int4.mosaic_experts import (default_options, expert_slots, lower_for_h200,
                                                  routed_experts_int4_mosaic, token_pad, wgmma_register_of)
from custom_calls.moe_int4.mosaic_layout import gate_up_halves, signed_int4, to_mosaic_layout, wgmma_column_order
from custom_calls.moe_int4.reference import routed_experts_int4_reference
from custom_calls.random_inputs import random_int4_experts
from tests.kernel_checks import rel_err

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
from mosaic_ops_report import lowered_kernels, step_counts  # noqa: E402


def make_experts(seed, e, d, inter, group_size=32):
  rng = np.random.default_rng(seed)
  arrays = []
  for shape in ((e, inter, d), (e, inter, d), (e, d, inter)):
    arrays += quantize_int4(rng.standard_normal(shape) * 0.05, group_size=group_size)
  return tuple(map(jnp.asarray, arrays))


def make_tokens(seed, t, k, ids_low, ids_high, d):
  rng = np.random.default_rng(seed)
  x = jnp.asarray(rng.standard_normal((t, d)), jnp.float32).astype(jnp.bfloat16)
  ids = np.stack([rng.choice(np.arange(ids_low, ids_high), k, replace=False) for _ in range(t)])
  w = jnp.asarray(rng.random((t, k)) + 0.1, jnp.float32)
  return x, jnp.asarray(ids, jnp.int32), w


def reference_f32(x, ids, w, stored, offset, group_size=32):
  return routed_experts_int4_reference(x.astype(jnp.float32), ids, w, *stored, group_size=group_size,
                                       expert_offset=offset)


def run_interpret(*args, **opts):
  out = jax.block_until_ready(routed_experts_int4_mosaic(*args, interpret=True, **opts))
  assert not gpu_callbacks.get_races().races_found
  return out


def test_layout_keeps_every_weight_and_scale():
  """signed int4 = the stored nibbles minus 8 in column order; gate/up rows interleave in blocks of 32 and come
  back out with gate_up_halves; scales are transposed with the same rows."""
  e, d, inter = 2, 128, 64
  stored = make_experts(0, e, d, inter)
  gp, gs, up, us, dp, ds = stored
  m = to_mosaic_layout(*stored)
  np.testing.assert_array_equal(np.asarray(signed_int4(gp).astype(jnp.int8)), np.asarray(unpack_int4(gp)))
  gate, upq = gate_up_halves(m.gate_up)
  np.testing.assert_array_equal(np.asarray(gate.astype(jnp.int8)), np.asarray(unpack_int4(gp)))
  np.testing.assert_array_equal(np.asarray(upq.astype(jnp.int8)), np.asarray(unpack_int4(up)))
  np.testing.assert_array_equal(np.asarray(m.gate_up[:, 32:64].astype(jnp.int8)), np.asarray(unpack_int4(up)[:, :32]))
  sg, su = gate_up_halves(jnp.swapaxes(m.gate_up_scale, 1, 2))
  np.testing.assert_array_equal(np.asarray(sg), np.asarray(gs))
  np.testing.assert_array_equal(np.asarray(su), np.asarray(us))
  np.testing.assert_array_equal(np.asarray(m.down.astype(jnp.int8)), np.asarray(unpack_int4(dp)))
  np.testing.assert_array_equal(np.asarray(m.down_scale), np.asarray(jnp.swapaxes(ds, 1, 2)))


def test_wgmma_column_order_is_its_own_inverse_and_swaps_column_pairs():
  """Stored column 8c + 2j + b holds column 8j + 2c + b of each 32-column block (c, j < 4, b < 2)."""
  q = np.random.default_rng(1).integers(-8, 8, (3, 64))
  words = jnp.asarray(pack_int4(q))
  stored = np.asarray(unpack_int4(wgmma_column_order(words)))
  for col in range(64):
    blk, r = divmod(col, 32)
    c, j, b = r // 8, (r % 8) // 2, r % 2
    np.testing.assert_array_equal(stored[:, col], q[:, 32 * blk + 8 * j + 2 * c + b])
  np.testing.assert_array_equal(np.asarray(wgmma_column_order(wgmma_column_order(words))), np.asarray(words))


def _thread_view(layout, shape):
  """For a Mosaic TiledLayout: {(warp, lane, register index): [(row, col) of each vector element]}, from the layout's
  tiling, warp, lane and vector dims (tiles applied to the trailing dims in turn; lane dims most major first)."""
  rows, cols = np.indices(shape)
  coords = np.stack([rows, cols], axis=-1)                           # [*shape, 2]
  for tile in layout.tiling.tiles:
    lead, tail = coords.shape[:-1 - len(tile)], coords.shape[-1 - len(tile):-1]
    split = [v for d, t in zip(tail, tile) for v in (d // t, t)]
    coords = coords.reshape(*lead, *split, 2)
    n = len(lead)
    order = list(range(n)) + [n + 2 * i for i in range(len(tile))] + [n + 2 * i + 1 for i in range(len(tile))]
    coords = coords.transpose(*order, coords.ndim - 1)
  tiled = coords.shape[:-1]
  thread_dims = {x % len(tiled) for x in (*layout.warp_dims, *layout.lane_dims, layout.vector_dim)}
  registers_shape = tuple(1 if i in thread_dims else d for i, d in enumerate(tiled))
  assert registers_shape == layout.registers_shape(shape)            # the simulation agrees with Mosaic
  view = {}
  for index in np.ndindex(*tiled):
    warp = index[layout.warp_dims[0]]
    lane = 0
    for dim in layout.lane_dims:
      lane = lane * tiled[dim] + index[dim]
    reg = tuple(0 if i in thread_dims else v for i, v in enumerate(index))
    view.setdefault((warp, lane, reg), []).append(tuple(coords[index]))
  return view


def test_wgmma_register_map_matches_mosaic_layouts_and_the_stored_order():
  """_as_wgmma_operand reads nibble pair j of a 4-bit-layout register as the wgmma register wgmma_register_of(idx, j)
  of the same thread. From Mosaic's layout definitions: both registers hold the same row, and the stored column the
  4-bit load reads is the one that mosaic_layout.wgmma_column_order puts at the logical column wgmma sees."""
  from jax.experimental.mosaic import gpu as mgpu
  shape = (64, 64)
  wgmma = _thread_view(mgpu.WGMMA_LAYOUT, shape)
  assert wgmma[(0, 1, (0,) * 9)] == [(0, 2), (0, 3)] and wgmma[(0, 4, (0,) * 9)] == [(1, 0), (1, 1)]  # PTX's picture
  loaded = _thread_view(mgpu.WGMMA_LAYOUT_UPCAST_4X, shape)
  # the stored column that holds logical column g under wgmma_column_order, read off the words themselves
  cols = np.arange(64)
  logical = np.stack([cols % 16 - 8, cols // 16 - 8])               # every column a distinct pair of int4 values
  stored = np.asarray(unpack_int4(wgmma_column_order(jnp.asarray(pack_int4(logical)))))
  held_at = {}
  for col in range(64):
    [held_at[col]] = [g for g in range(64) if (logical[:, g] == stored[:, col]).all()]
  checked = 0
  for (warp, lane, reg), elements in loaded.items():
    assert len(elements) == 8
    for j in range(4):
      target = wgmma[(warp, lane, wgmma_register_of(reg, j))]
      for b in range(2):
        (row_s, col_s), (row_g, col_g) = elements[2 * j + b], target[b]
        assert row_s == row_g and col_g == held_at[col_s]
        checked += 1
  assert checked == 64 * 64


def test_expert_slots_with_remote_and_repeated_experts():
  """Local experts 4..7 (offset 4): slots in ascending local id, the count, and each token's weight per slot."""
  ids = jnp.asarray([[6, 1], [4, 6], [9, 0]], jnp.int32)        # token 2 has no local expert
  w = jnp.asarray([[0.5, 0.25], [0.125, 2.0], [1.0, 3.0]], jnp.float32)
  used, slot_expert, slot_weight = jax.jit(expert_slots, static_argnums=(3, 4))(ids, w, jnp.int32(4), 4, 4)
  assert used.tolist() == [2]
  assert slot_expert.tolist()[:2] == [0, 2]                      # local 0 (global 4), local 2 (global 6)
  np.testing.assert_array_equal(np.asarray(slot_weight), [[0, 0.5, 0, 0], [0.125, 2.0, 0, 0], [0, 0, 0, 0]])


CASES = [
    # (tokens, top-k, local experts, offset, D, I, group size, kernel options)
    (1, 4, 6, 2, 256, 128, 32, dict(block_k=128, stages=2)),                   # 1 token: most slots unused
    (5, 3, 4, 0, 256, 128, 32, dict(block_k=64, stages=3, k_splits=2, slot_lanes=1)),   # one lane runs every slot
    (11, 2, 4, 3, 256, 256, 64, dict(block_k=128, k_splits_down=2, slot_lanes=3)),   # 16-token pad, groups of 64
    (16, 2, 3, 0, 128, 128, 32, {}),                                           # the defaults, stages > steps
    (7, 3, 5, 1, 256, 128, 32, dict(wgmma_order=True, block_k=128)),           # registers as stored (see layout)
    (3, 2, 2, 0, 256, 256, 128, dict(block_k=128, stages=1)),                 # groups of 128, one stage
]


@pytest.mark.parametrize("t,k,e,offset,d,inter,group_size,opts", CASES)
def test_matches_reference(t, k, e, offset, d, inter, group_size, opts):
  stored = make_experts(t + e, e, d, inter, group_size)
  x, ids, w = make_tokens(t, t, k, 0, offset + e + 3, d)
  experts = to_mosaic_layout(*stored, group_size=group_size, wgmma_order=opts.get("wgmma_order", False))
  out = run_interpret(x, ids, w, experts, offset, group_size=group_size, **opts)
  assert out.shape == x.shape and out.dtype == jnp.bfloat16
  assert rel_err(out, reference_f32(x, ids, w, stored, offset, group_size)) < 1e-2


def test_token_without_local_expert_is_zero_and_offset_traced():
  """Token 0 routes only to remote experts: its row is exactly zero."""
  e, d, inter, offset = 4, 128, 64, 4
  stored = make_experts(3, e, d, inter)
  ids = jnp.asarray([[0, 11], [4, 9], [5, 7], [2, 6]], jnp.int32)
  x, _, w = make_tokens(4, 4, 2, 0, 12, d)
  m = to_mosaic_layout(*stored)
  f = jax.jit(lambda off: routed_experts_int4_mosaic(x, ids, w, m, off, interpret=True))
  out = jax.block_until_ready(f(jnp.int32(offset)))
  np.testing.assert_array_equal(np.asarray(out[0], np.float32), 0.0)
  assert rel_err(out, reference_f32(x, ids, w, stored, offset)) < 1e-2


def test_no_local_expert_at_all_and_an_expert_twice_in_a_token():
  """No token routes to this device (no slot used: every output is the kernels' unwritten memory, masked to exact
  zeros); then a token that lists one expert twice (its two weights add up, as in the reference)."""
  e, d, inter = 3, 128, 64
  stored = make_experts(5, e, d, inter)
  m = to_mosaic_layout(*stored)
  x, _, w = make_tokens(6, 2, 2, 0, 8, d)
  remote = jnp.asarray([[5, 7], [6, 3]], jnp.int32)
  np.testing.assert_array_equal(np.asarray(run_interpret(x, remote, w, m, 0), np.float32), 0.0)
  twice = jnp.asarray([[1, 1], [2, 0]], jnp.int32)
  out = run_interpret(x, twice, w, m, 0)
  assert rel_err(out, reference_f32(x, twice, w, stored, 0)) < 1e-2


def test_defaults_and_token_pad():
  assert default_options(7168, 2048) == (256, 2, 1)                  # K2.6: 28 steps of 256, gate/up in two
  assert default_options(384, 192) == (64, 2, 1)
  assert [token_pad(t) for t in (1, 8, 9, 16)] == [8, 8, 16, 16]


def test_rejects_bad_inputs():
  e, d, inter = 2, 128, 64
  stored = make_experts(1, e, d, inter)
  m = to_mosaic_layout(*stored)
  x, ids, w = make_tokens(0, 2, 2, 0, 4, d)
  call = lambda x_=x, experts=m, **kw: routed_experts_int4_mosaic(x_, ids, w, experts, 0, interpret=True, **kw)
  with pytest.raises(ValueError, match="bf16 activations"):
    call(x.astype(jnp.float32))
  with pytest.raises(ValueError, match="17 tokens"):
    routed_experts_int4_mosaic(jnp.zeros((17, d), jnp.bfloat16), jnp.zeros((17, 2), jnp.int32),
                               jnp.zeros((17, 2)), m, 0, interpret=True)
  with pytest.raises(ValueError, match="block_k 96"):
    call(block_k=96)
  with pytest.raises(ValueError, match="k_splits 3"):
    call(k_splits=3)
  with pytest.raises(ValueError, match="stages 0"):
    call(stages=0)
  with pytest.raises(ValueError, match="group_size 16"):
    call(group_size=16)
  with pytest.raises(ValueError, match="slot_lanes 0"):
    call(slot_lanes=0)
  with pytest.raises(ValueError, match="gate_up_scale"):
    call(experts=m._replace(gate_up_scale=m.gate_up_scale.astype(jnp.float32)))
  gp, gs, up, us, dp, ds = stored
  with pytest.raises(TypeError, match="down_scale is float32"):
    to_mosaic_layout(gp, gs, up, us, dp, ds.astype(jnp.float32))
  with pytest.raises(ValueError, match="up_packed has shape"):
    to_mosaic_layout(gp, gs, up[:, :32], us, dp, ds)


@pytest.mark.parametrize("tokens,opts", [(1, {}), (8, dict(stages=6)),
                                         (16, dict(block_k=512, k_splits=7, k_splits_down=2, slot_lanes=16)),
                                         (4, dict(wgmma_order=True))])
def test_lowers_for_h200_k26_shard(tokens, opts):
  """Both kernels (gate/up and down) lower for CUDA at the K2.6 shard (48 experts, D 7168, I 2048): Mosaic builds
  the TMA pipeline, the 4-bit loads, the wgmma-layout relayout and the m64nNk16 wgmma here."""
  text = lower_for_h200(tokens, **opts).as_text()
  assert text.count("mosaic_gpu_v2") == 2


def test_lowered_step_work_and_shared_memory():
  """benchmarks/mosaic_ops_report.py's counts (RESULTS, sixteenth round): one 256-column step of a thread is 4 ldmatrix,
  64 int4 -> bf16x2 conversions, 64 scale multiplies, 16 scale loads and 16 wgmma; the relayout to the wgmma layout
  is 32 shuffles and 32 byte permutes, none with wgmma_order; 54 KB of shared memory a program at one token, 72 KB
  at 16."""
  for tokens, opts, relayout, smem in ((1, {}, 32, 55328), (16, dict(wgmma_order=True), 0, 73760)):
    for text in lowered_kernels(tokens, **opts):
      counts, smem_bytes = step_counts(text)
      assert counts == dict(ldmatrix=4, shuffle=relayout, byte_permute=relayout, int4_to_bf16x2=64,
                            scale_mul_bf16x2=64, scale_load=16, wgmma=16)
      assert smem_bytes == smem


@pytest.fixture(scope="module")
def k26_shard_experts():
  """K2.6's per-GPU expert shard (48 experts, D 7168, I 2048, group 32) with random words and scales, made on the
  device (numpy quantisation of 2 G weights would take minutes): the stored arrays and both Mosaic layouts."""
  stored = random_int4_experts(jax.random.split(jax.random.PRNGKey(0), 6), 48, 7168, 2048)
  return stored, {order: to_mosaic_layout(*stored, wgmma_order=order) for order in (False, True)}


@pytest.mark.gpu
@pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a GPU backend (jax.default_backend() == 'gpu')")
@pytest.mark.parametrize("tokens,opts", [(1, {}), (6, {}), (16, {}), (9, dict(stages=6)),
                                         (1, dict(wgmma_order=True)), (12, dict(wgmma_order=True))])
def test_gpu_matches_reference_k26_shard(k26_shard_experts, tokens, opts):
  """The compiled kernels at the K2.6 per-GPU shard (48 local experts of 384, top-8)."""
  stored, layouts = k26_shard_experts
  x, ids, w = make_tokens(tokens, tokens, 8, 0, 384, 7168)
  ids = ids.at[:, 0].set(jnp.arange(tokens, dtype=jnp.int32) * 5 % 48)   # every token has a local expert
  out = routed_experts_int4_mosaic(x, ids, w, layouts[opts.get("wgmma_order", False)], 0, **opts)
  assert rel_err(out, reference_f32(x, ids, w, stored, 0)) < 1e-2
