"""The few-token MoE with its down projection in Mosaic GPU, the first expert's words copied before the
dependent-launch wait (custom_calls/moe_int4/mosaic_down_prewait.py), against the XLA reference.

On the CPU: the Triton gate/up kernel and the Mosaic down kernel under their interpreters (Mosaic's race detector
on) at small shapes, and the lowering for CUDA at the K2.6 shard against an abstract H200, where the placement of
`griddepcontrol.wait` among the kernel's copies is checked. The tests marked gpu compile and run it.
"""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src.pallas.mosaic_gpu.interpret import gpu_callbacks  # private: race detector state

from custom_calls.moe_int4.k_chunks import experts_to_k_chunks
from custom_calls.moe_int4.mosaic_down_prewait import (MAX_PAIRS, lower_for_h200, pair_rows,
                                                       routed_experts_int4_prewait_down)
from custom_calls.moe_int4.mosaic_layout import down_to_mosaic_layout
from custom_calls.random_inputs import random_int4_experts
from tests.kernel_checks import rel_err
from tests.test_kernels_moe_mosaic import make_experts, make_tokens, reference_f32


def run_interpret(x, ids, w, stored, offset, *, group_size=32, k_chunk=None, wgmma_order=False, **opts):
  """The kernels on the stored experts: gate/up words as stored (or k-chunked), down in the Mosaic layout."""
  gate_up = stored[:4]
  if k_chunk:
    gate_up = experts_to_k_chunks(stored, k_chunk, group_size=group_size)[:4]
  down = down_to_mosaic_layout(*stored[4:], wgmma_order=wgmma_order)
  out = jax.block_until_ready(routed_experts_int4_prewait_down(
      x, ids, w, *gate_up, *down, offset, group_size=group_size, wgmma_order=wgmma_order, interpret=True, **opts))
  assert not gpu_callbacks.get_races().races_found
  return out


CASES = [
    # (tokens, top-k, local experts, offset, D, I, group size, options)
    (1, 8, 6, 0, 128, 256, 32, dict(block_k=128)),                  # one token: 8 pairs, some remote
    (1, 6, 4, 2, 128, 256, 32, dict(block_k=128, k_chunk=128)),     # 6 pairs (h padded to 8 rows), k-chunked gate/up
    (2, 8, 5, 0, 256, 256, 64, dict(stages=1)),                     # 16 pairs, most local: the pipelined pairs
    (1, 4, 3, 1, 128, 256, 32, dict(block_k=64, wgmma_order=True)),   # registers as stored
    (2, 3, 4, 0, 128, 256, 32, dict(block_k=128, prewait=False)),   # the copies after the wait (A/B baseline)
    (1, 8, 6, 0, 128, 256, 32, dict(block_k=64, warpgroups=2)),     # two warpgroups, 2 of the 4 K steps each
    (2, 8, 5, 1, 128, 256, 32, dict(block_k=128, warpgroups=2, stages=1)),   # ... with pipelined pairs
]


@pytest.mark.parametrize("t,k,e,offset,d,inter,group_size,opts", CASES)
def test_matches_reference(t, k, e, offset, d, inter, group_size, opts):
  stored = make_experts(t + e, e, d, inter, group_size)
  x, ids, w = make_tokens(t, t, k, 0, offset + e + 3, d)
  out = run_interpret(x, ids, w, stored, offset, group_size=group_size, **opts)
  assert out.shape == x.shape and out.dtype == jnp.bfloat16
  assert rel_err(out, reference_f32(x, ids, w, stored, offset, group_size)) < 1e-2


def test_token_without_local_expert_is_zero_and_offset_traced():
  """Token 0 routes only to remote experts (its row is exact zeros); token 1 lists local expert 1 twice (its two
  weights add up, as in the reference); the offset is traced; the routing weights are bf16."""
  e, d, inter, offset = 4, 128, 256, 4
  stored = make_experts(3, e, d, inter)
  ids = jnp.asarray([[0, 11, 2], [5, 9, 5]], jnp.int32)
  x, _, w = make_tokens(4, 2, 3, 0, 12, d)
  w = w.astype(jnp.bfloat16)                          # routing weights in bf16: converted in the kernel
  down = down_to_mosaic_layout(*stored[4:])
  f = jax.jit(lambda off: routed_experts_int4_prewait_down(x, ids, w, *stored[:4], *down, off, block_k=128,
                                                           interpret=True))
  out = jax.block_until_ready(f(jnp.int32(offset)))
  np.testing.assert_array_equal(np.asarray(out[0], np.float32), 0.0)
  assert rel_err(out, reference_f32(x, ids, w, stored, offset)) < 1e-2


def test_no_local_pair_at_all_is_zero():
  """Every program takes the no-pair path (nothing copied, no barrier waited on) and writes zeros."""
  e, d, inter = 3, 128, 256
  stored = make_experts(5, e, d, inter)
  x, _, w = make_tokens(6, 1, 4, 0, 8, d)
  out = run_interpret(x, jnp.asarray([[5, 7, 3, 6]], jnp.int32), w, stored, 0, block_k=128)
  np.testing.assert_array_equal(np.asarray(out, np.float32), 0.0)


def test_pair_rows():
  assert [pair_rows(p) for p in (1, 6, 8, 9, 16, 64)] == [8, 8, 8, 16, 16, 64]


def test_rejects_bad_inputs():
  e, d, inter = 2, 128, 256
  stored = make_experts(1, e, d, inter)
  down = down_to_mosaic_layout(*stored[4:])
  x, ids, w = make_tokens(0, 1, 2, 0, 4, d)

  def call(x_=x, ids_=ids, w_=w, down_=down, **kw):
    return routed_experts_int4_prewait_down(x_, ids_, w_, *stored[:4], *down_, 0, interpret=True, **kw)

  with pytest.raises(ValueError, match="bf16 activations"):
    call(x.astype(jnp.float32))
  many = MAX_PAIRS // 2 + 1
  with pytest.raises(ValueError, match=f"{many} tokens x top-2"):
    call(jnp.zeros((many, d), jnp.bfloat16), jnp.zeros((many, 2), jnp.int32), jnp.ones((many, 2)))
  with pytest.raises(ValueError, match="block_k 96"):
    call(block_k=96)
  with pytest.raises(ValueError, match="stages 0"):
    call(stages=0)
  with pytest.raises(ValueError, match="warpgroups 2 must be 1 or 2 and divide the 1 K steps"):
    call(warpgroups=2)
  with pytest.raises(ValueError, match="warpgroups 3"):
    call(warpgroups=3, block_k=64)
  with pytest.raises(ValueError, match="group_size 16"):
    call(group_size=16)
  with pytest.raises(ValueError, match="down is int32"):
    call(down_=(stored[4], down[1]))
  with pytest.raises(ValueError, match="down_scale is float32"):
    call(down_=(down[0], down[1].astype(jnp.float32)))
  with pytest.raises(ValueError, match="gate_up_h_matrix: up_packed"):
    routed_experts_int4_prewait_down(x, ids, w, stored[0], stored[1], stored[2][:, :64], stored[3], *down, 0,
                                     interpret=True)
  with pytest.raises(ValueError, match="down_to_mosaic_layout: down_packed"):
    down_to_mosaic_layout(stored[4][0], stored[5])


def _down_module(tokens, **opts):
  modules = []
  low = lower_for_h200(tokens, on_mosaic_module=lambda m: modules.append(str(m)), **opts)
  assert len(modules) == 1
  return low.as_text(), modules[0]


TMA_LOAD = "cp.async.bulk.tensor.shared.cluster.global"


@pytest.mark.parametrize("prewait,warpgroups,after,smem", [(True, 1, 14, 125984), (False, 1, 30, 125984),
                                                          (True, 2, 24, 111640)])
def test_lowers_for_h200_with_the_wait_after_the_first_pairs_copies(prewait, warpgroups, after, smem):
  """K2.6 shard, one token (I 2048 in 8 steps of 256): with prewait, the 16 copies of the first pair's words and
  scales come before the kernel's one `griddepcontrol.wait`; after it, h's 8 copies and those of the later pairs (one
  warpgroup: the 6 of their 2-stage pipeline; two: the 16 of a whole tile). Without prewait every copy follows it.
  Either way the kernel is a PDL launch (the wait is its own), and the Triton gate/up kernel issues launch_dependents
  (trigger_dependents, on by default) or, with it off, does not. Shared memory a program: 64 KB of words, 8 KB of
  scales, 32 KB of h, with one warpgroup two 9-KB pipeline stages (123 KB), with two a 2-KB f32 exchange (109 KB):
  one program an SM beside the gate/up kernel's."""
  hlo, module = _down_module(1, prewait=prewait, trigger_dependents=prewait, warpgroups=warpgroups)
  wait = module.find("griddepcontrol.wait")
  assert wait > 0 and module.count("griddepcontrol.wait") == 1
  assert (module[:wait].count(TMA_LOAD), module[wait:].count(TMA_LOAD)) == ((16, after) if prewait else (0, after))
  assert "mosaic_gpu.uses_pdl" in module
  assert ("griddepcontrol.launch_dependents" in hlo) == prewait
  found = re.search(r"dynamic_shared_memory_size %c(\d+)_i32", module)
  assert found and int(found.group(1)) == smem


def test_down_kernel_takes_only_gate_up_outputs_and_reshaped_arguments():
  """Nothing of XLA's may run between the two kernels (it would end the dependent launch: XLA's kernels trigger
  their dependents only when they exit). So every operand of the Mosaic down call is a jit argument, a reshape of one
  (a bitcast, no kernel), or a result of the gate/up call (h, and the planes array whose offset word it reads)."""
  hlo = lower_for_h200(1).as_text()
  body = hlo[hlo.index("func.func private @routed_experts_int4_prewait_down"):]
  body = body[:body.index("\n  }")]
  operands = re.search(r"stablehlo.custom_call @mosaic_gpu_v2\(([^)]*)\)", body).group(1).split(", ")
  gate_up = re.search(r"(%\d+):\d+ = call @gate_up_h_matrix", body).group(1)
  for operand in operands:
    name = operand.split("#")[0]
    if name == gate_up or name.startswith("%arg"):
      continue
    defined = re.search(rf"{re.escape(name)} = stablehlo.reshape %arg\d+ :", body)
    assert defined, f"down kernel operand {operand} is made by an XLA op between the kernels"
  assert sum(o.startswith(gate_up + "#") for o in operands) == 2


@pytest.fixture(scope="module")
def k26_shard():
  """K2.6's per-GPU expert shard (48 experts, D 7168, I 2048, group 32), random words and scales made on the
  device: the stored arrays, the gate/up words k-chunked by 256 (the dispatch's layout on a GPU), and the down
  half in the Mosaic layout."""
  stored = random_int4_experts(jax.random.split(jax.random.PRNGKey(0), 6), 48, 7168, 2048)
  return stored, experts_to_k_chunks(stored, 256)[:4], down_to_mosaic_layout(*stored[4:])


@pytest.mark.gpu
@pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a GPU backend (jax.default_backend() == 'gpu')")
@pytest.mark.parametrize("tokens,local,warpgroups", [(1, 1, 1), (1, 3, 1), (2, 8, 1), (1, 1, 2), (1, 3, 2)])
def test_gpu_matches_reference_k26_shard_and_the_wait_changes_no_bit(k26_shard, tokens, local, warpgroups):
  """The compiled kernels at the K2.6 shard with `local` local pairs a token: within bf16 tolerance of the
  reference, and the same bits with the first pair's copies before or after the wait, with or without the gate/up
  kernel's early trigger (a wrong wait would read h before gate/up wrote it)."""
  stored, gate_up, down = k26_shard
  x, _, w = make_tokens(tokens, tokens, 8, 0, 384, 7168)
  j, t = jnp.arange(8), jnp.arange(tokens)[:, None]
  ids = jnp.where(j < local, (t * 5 + j * 7) % 48, 48 + t * 8 + j).astype(jnp.int32)   # distinct in a token
  out = routed_experts_int4_prewait_down(x, ids, w, *gate_up, *down, 0, warpgroups=warpgroups)
  assert rel_err(out, reference_f32(x, ids, w, stored, 0)) < 1e-2
  plain = routed_experts_int4_prewait_down(x, ids, w, *gate_up, *down, 0, prewait=False, trigger_dependents=False,
                                           warpgroups=warpgroups)
  np.testing.assert_array_equal(np.asarray(out), np.asarray(plain))
