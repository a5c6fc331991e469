"""`dequant_planes_bf16(words, scales)`: compressed-tensors INT4 words -> 8 bf16 nibble planes, two weights per
instruction.

Plane j of a [BN, W] word tile is the bf16 tile (nib_j - 8) * scale, nibble j = bits 4j..4j+3 (column 8w + j of
word w). On the GPU this is a few lines of PTX per PAIR of words (Marlin's trick, in bf16x2): a PRMT gathers byte
b of both words, a LOP3 drops each nibble into the mantissa of the bf16 magic 128 (0x4300), so a 32-bit register
holds two bf16 values 128 + nib; one bf16x2 FMA subtracts 136 (exact) and one multiplies by the two scales (the
only rounding, once, to bf16). Per weight: one bf16x2 FMA (two per pair of weights), half a LOP3, a quarter
of a PRMT and of a SHF: 2 instructions, against 3.5 for the float32 route of nibbles.py (LOP3, FADD, FMUL, half
an F2FP). In the grouped kernel's SASS the planes feed the HMMAs directly (no shared-memory round trip).

It is a JAX primitive: the Pallas Triton lowering emits the inline PTX (`tt.elementwise_inline_asm`, two
elements per instance); everywhere else (the Pallas interpreter on the CPU, XLA) it is the same arithmetic in
jnp, which rounds identically (the product of a 4-bit integer and a bf16 scale is exact in float32, then one
round-to-nearest-even to bf16). tests/test_bf16_planes.py checks the PTX against it, bit for bit, on the GPU.

Registers into jax._src.pallas.triton (private; jax is pinned to 0.11.2 everywhere, and
tests/test_kernels_lowering.py lowers and verifies every kernel that uses it).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.extend.core import Primitive
from jax.interpreters import mlir

dequant_planes_bf16_p = Primitive("dequant_planes_bf16")
dequant_planes_bf16_p.multiple_results = True


def dequant_planes_bf16(words, scales):
  """words: int32 [..., W]; scales: bf16, same shape (the scale of each word's group) ->
  [plane_j for j in 0..7], bf16 [..., W] each: (nib_j(word) - 8) * scale, rounded once."""
  if words.dtype != jnp.int32 or scales.dtype != jnp.bfloat16 or words.shape != scales.shape:
    raise TypeError(f"dequant_planes_bf16: need int32 words and bf16 scales of one shape, got "
                    f"{words.dtype}{words.shape} and {scales.dtype}{scales.shape}")
  return dequant_planes_bf16_p.bind(words, scales)


def dequant_group_planes_bf16(words, group_scales):
  """words: int32 [BN, W]; group_scales: [BN, G] (W a multiple of G; the W/G adjacent words of a group share
  its scale) -> dequant_planes_bf16 of the tile. The scales broadcast through a [BN, G, W/G] view: a per-word
  gather would give the tile a layout that Triton stores to shared memory one element at a time."""
  bn, w = words.shape
  g = group_scales.shape[1]
  word_scales = jnp.broadcast_to(group_scales[:, :, None], (bn, g, w // g)).reshape(bn, w)
  return dequant_planes_bf16(words, word_scales.astype(jnp.bfloat16))


def _reference(words, scales):
  s = scales.astype(jnp.float32)
  return [((((words >> (4 * j)) & 0xF).astype(jnp.float32) - 8.0) * s).astype(jnp.bfloat16) for j in range(8)]


@dequant_planes_bf16_p.def_abstract_eval
def _abstract(words, scales):
  del scales
  return [jax.core.ShapedArray(words.shape, jnp.bfloat16)] * 8


dequant_planes_bf16_p.def_impl(jax.jit(_reference))
mlir.register_lowering(dequant_planes_bf16_p, mlir.lower_fun(_reference, multiple_results=True))


def _ptx():
  """Inline PTX for one pair of words: $0..$7 = planes 0..7 (bf16x2: low half from word $8, high from $9),
  $10 = the two scales (bf16x2, same order)."""
  lines = ["{", ".reg .b32 t, v, m, k, one, c136, nz;",
           "mov.b32 m, 0x000F000F;", "mov.b32 k, 0x43004300;",              # nibble mask; bf16 128.0 twice
           "mov.b32 one, 0x3F803F80;", "mov.b32 c136, 0xC308C308;",         # 1.0, -136.0
           "mov.b32 nz, 0x80008000;"]                                        # -0.0: fma(q, s, -0) = q * s
  for b in range(4):                                   # byte b of each word holds nibbles 2b (low), 2b+1 (high)
    sel = b | (b << 4) | ((4 + b) << 8) | ((4 + b) << 12)
    lines.append(f"prmt.b32 t, $8, $9, {sel:#06x};")   # byte b of $8 -> bytes 0,1; of $9 -> bytes 2,3
    for half, out in ((0, 2 * b), (1, 2 * b + 1)):
      if half:
        lines.append("shr.u32 t, t, 4;")
      lines += ["lop3.b32 v, t, m, k, 0xEA;",          # (t & m) | k: bf16x2 (128 + nib, 128 + nib')
                "fma.rn.bf16x2 v, v, one, c136;",      # nib - 8, exact
                f"fma.rn.bf16x2 ${out}, v, $10, nz;"]  # (nib - 8) * scale, one rounding
  lines.append("}")
  return "\n".join(lines)


def _register_triton_rule():
  from jax._src.lib.triton import dialect as tt_dialect
  from jax._src.pallas.triton import lowering as triton_lowering

  asm = _ptx()

  def rule(ctx, words, scales):
    out_type = mlir.aval_to_ir_type(ctx.context.mlir_ctx, ctx.avals_out[0])
    results = tt_dialect.elementwise_inline_asm(
        [out_type] * 8, asm, constraints=",".join(["=r"] * 8 + ["r"] * 3), pure=True, packed_element=2,
        args=[words, scales])
    return list(results)

  triton_lowering.triton_lowering_rules[dequant_planes_bf16_p] = rule


_register_triton_rule()
