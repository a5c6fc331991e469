"""The tree walk as one Pallas kernel per sequence (Triton lowering; CPU via interpret=True).

The XLA reference is a scan of max_depth steps, each a few small kernels; here the walk runs in one
program per sequence over register vectors of the N+1 tree slots. Same contract as reference.py.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from custom_calls.pow2 import next_pow2


def _kernel(tok_ref, par_ref, val_ref, tgt_ref, path_ref, nacc_ref, bonus_ref, *, n1, NP, DP, max_depth):
  b = pl.program_id(0)
  ni = jnp.arange(NP, dtype=jnp.int32)
  di = jnp.arange(DP, dtype=jnp.int32)
  tok = plgpu.load(tok_ref.at[b])      # inputs are padded to NP slots (padding: never valid)
  par = plgpu.load(par_ref.at[b])
  val = plgpu.load(val_ref.at[b])
  tgt = plgpu.load(tgt_ref.at[b])

  def body(i, st):
    cur, alive, count, path = st
    want = jnp.sum(jnp.where(ni == cur, tgt, 0))
    match = (val > 0) & (par == cur) & (tok == want)
    child = jnp.min(jnp.where(match, ni, NP))
    found = (child < NP) & alive
    cur = jnp.where(found, child, cur)
    path = jnp.where(di == i + 1, cur, path)
    return cur, found, count + found.astype(jnp.int32), path

  init = (jnp.int32(0), jnp.bool_(True), jnp.int32(1), jnp.zeros((DP,), jnp.int32))
  cur, _, count, path = jax.lax.fori_loop(0, max_depth, body, init)
  plgpu.store(path_ref.at[b], path)
  plgpu.store(nacc_ref.at[b], count)
  plgpu.store(bonus_ref.at[b], jnp.sum(jnp.where(ni == cur, tgt, 0)))


@functools.partial(jax.jit, static_argnames=("max_depth", "interpret"))
def tree_walk_pallas(tree_tokens, parents, valid, target_tokens, *, max_depth: int, interpret: bool = False):
  b, n1 = tree_tokens.shape
  NP, DP = next_pow2(n1), next_pow2(max_depth + 1)
  kernel = functools.partial(_kernel, n1=n1, NP=NP, DP=DP, max_depth=max_depth)
  path, n_acc, bonus = pl.pallas_call(
      kernel, grid=(b,),
      out_shape=[jax.ShapeDtypeStruct((b, DP), jnp.int32), jax.ShapeDtypeStruct((b,), jnp.int32),
                 jax.ShapeDtypeStruct((b,), jnp.int32)],
      compiler_params=plgpu.CompilerParams(num_warps=1, num_stages=1),
      interpret=interpret)(*(jnp.pad(x.astype(jnp.int32), ((0, 0), (0, NP - n1)))
                             for x in (tree_tokens, parents, valid, target_tokens)))
  return path[:, :max_depth + 1], n_acc, bonus
