"""`dot_accumulate(acc, a, b)` = acc + a @ b, lowered to ONE Triton dot that accumulates into `acc`.

Pallas' Triton lowering emits every dot as `tt.dot(a, b, zeros)` and the `acc + ...` as a separate add, and
Triton 3.6 does not fold the two. For a large fp32 accumulator that doubles its registers: the MLA tree
kernel's [64, 512] output tile (128 registers per thread at 8 warps) spilled 67 stores / 76 loads to local
memory per key block (H200 SASS, read offline with Triton's ptxas/nvdisasm). Folded, the main loop has none.

This is a small JAX primitive: everywhere outside the Pallas Triton lowering (XLA on CPU/GPU, the Pallas
interpreter) it is `acc + dot(a, b)` with fp32 accumulation; the Pallas Triton lowering rule passes `acc`
as the dot's C operand. It registers into jax._src.pallas.triton (a private module; the project pins
jax 0.11.2 on every machine, and tests/test_kernels_lowering.py lowers every kernel that uses it).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import mlir

dot_accumulate_p = Primitive("dot_accumulate")


def dot_accumulate(acc, a, b, *, trans_b=False, precision=None):
  """acc: f32 [M, N]; a: [M, K]; b: [K, N] (or [N, K] with trans_b) -> f32 [M, N] = acc + a @ b.

  precision: None (the operands' own type on tensor cores) or lax.Precision.HIGHEST (fp32 operands, IEEE).
  """
  if acc.dtype != jnp.float32:
    raise TypeError(f"dot_accumulate: the accumulator must be float32, got {acc.dtype}")
  if a.dtype != b.dtype:
    raise TypeError(f"dot_accumulate: operand dtypes differ: {a.dtype} and {b.dtype}")
  k_b, n_b = (b.shape[1], b.shape[0]) if trans_b else b.shape
  if a.ndim != 2 or b.ndim != 2 or a.shape[1] != k_b or acc.shape != (a.shape[0], n_b):
    raise ValueError(f"dot_accumulate: shapes acc {acc.shape}, a {a.shape}, b {b.shape} (trans_b={trans_b}) "
                     "do not form acc[M, N] + a[M, K] @ b[K, N]")
  if precision not in (None, lax.Precision.HIGHEST):
    raise ValueError(f"dot_accumulate: precision must be None or HIGHEST, got {precision}")
  return dot_accumulate_p.bind(acc, a, b, trans_b=trans_b, highest=precision == lax.Precision.HIGHEST)


def _reference(acc, a, b, *, trans_b, highest):
  dims = (((1,), (1,)), ((), ())) if trans_b else (((1,), (0,)), ((), ()))
  prec = lax.Precision.HIGHEST if highest else None
  return acc + lax.dot_general(a, b, dims, precision=prec, preferred_element_type=jnp.float32)


@dot_accumulate_p.def_abstract_eval
def _abstract(acc, a, b, *, trans_b, highest):
  del a, b, trans_b, highest
  return jax.core.ShapedArray(acc.shape, acc.dtype)


dot_accumulate_p.def_impl(jax.jit(_reference, static_argnames=("trans_b", "highest")))
mlir.register_lowering(dot_accumulate_p, mlir.lower_fun(_reference, multiple_results=False))


def _register_triton_rule():
  """The Pallas Triton lowering: tt.dot(a, b, acc)."""
  from jax._src.lib.triton import dialect as tt_dialect
  from jax._src.pallas.triton import lowering as triton_lowering

  def rule(ctx, acc, a, b, *, trans_b, highest):
    del ctx
    if trans_b:
      b = tt_dialect.trans(b, (1, 0))
    precision = tt_dialect.InputPrecision.IEEE if highest else None
    return tt_dialect.dot(a, b, acc, input_precision=precision)

  triton_lowering.triton_lowering_rules[dot_accumulate_p] = rule


_register_triton_rule()
