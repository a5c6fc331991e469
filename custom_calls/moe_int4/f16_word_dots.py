"""`int4_word_dots_f16(words, pairs)`: the dot of each compressed-tensors INT4 word with its 8 activations, in
half2 arithmetic: about 2 instructions per weight, against 3 for the float32 nibble planes (nibbles.py).

A word holds nibbles n_0..n_7 (bits 4j..4j+3; column 8w + j, stored as q + 8). Its 32 bits are two 16-bit
halves, so one LOP3 with the fp16 magic 1024 (0x6400) in both halves turns nibbles j and j + 4 into a half2
(1024 + n_j, 1024 + n_{j+4}) for j = 0, 2 (mask 0x000F000F), and (1024 + 16 n_j, 1024 + 16 n_{j+4}) for
j = 1, 3 (mask 0x00F000F0); the word shifted down 8 bits gives j = 2, 3. One half2 subtraction (1032, or 1152
for the x16 pairs) leaves (n - 8) or 16 (n - 8), exactly. Four half2 FMAs against the activation pairs sum the
8 products in two fp16 lanes, which are then widened and added in float32. Per word: 4 LOP3, 1 SHF, 4 HADD2,
4 HFMA2, 2 conversions and 1 FADD, for 8 weights.

Activation pairs (`activation_pairs`): [n, p * (K/8) + w] holds the bits of the half2 (x'[n, 8w + p],
x'[n, 8w + p + 4]) * (1/16 if p is odd else 1), p = 0..3, where x' = x * t_n and t_n is a power of two per token
(<= 1) that keeps max |x'| <= 1024, so that no product or 4-term lane sum (<= 32 * 1024) overflows fp16. The
kernel multiplies its float32 results by 1 / t_n (exact).

Numerics: the (n - 8) are exact; each product and each partial sum of a lane is rounded to fp16 (11-bit
significand: relative 2**-11), 4 terms per lane; everything after (groups, scales, the K sum) is float32. So
per word the error is a few units of 2**-11 of its largest product: well inside bf16 tolerance, but not the
float32 route's exact products, so this is an option of the gemv (`f16_dots`), measured before it is a default.

It is a JAX primitive: the Pallas Triton lowering emits the inline PTX (`tt.elementwise_inline_asm`, one word
per instance); everywhere else (the Pallas interpreter on the CPU, XLA) the same steps in jnp, each rounded to
fp16 from float32 (the GPU's FMA rounds once; the jnp sum may round twice when the two terms' exponents are
far apart, so the CPU and GPU agree to about 2**-11 of a word's products, not always bit for bit).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import mlir

X_MAX = 1024.0          # activations are scaled per token (by a power of two) to at most this in magnitude

int4_word_dots_f16_p = Primitive("int4_word_dots_f16")


def int4_word_dots_f16(words, p0, p1, p2, p3):
  """words: int32 [...]; p0..p3: int32 [...] (activation_pairs' half2 bits for pairs 0..3 of each word) ->
  float32 [...]: sum_j (n_j(word) - 8) * x'_j, with the products and lane sums in fp16."""
  for p in (p0, p1, p2, p3):
    if words.dtype != jnp.int32 or p.dtype != jnp.int32 or p.shape != words.shape:
      raise TypeError(f"int4_word_dots_f16: need int32 words and int32 activation pairs of one shape, got "
                      f"{words.dtype}{words.shape} and {p.dtype}{p.shape}")
  return int4_word_dots_f16_p.bind(words, p0, p1, p2, p3)


def activation_pairs(x):
  """x: [N, D] -> (int32 [N, 4 * D/8] activation pairs (module docstring), float32 [N] 1 / t_n)."""
  n, d = x.shape
  xf = x.astype(jnp.float32)
  peak = jnp.max(jnp.abs(xf), axis=1)                                          # [N]
  # the smallest e >= 0 with peak * 2**-e <= X_MAX (frexp: peak / X_MAX = m * 2**k, 0.5 <= m < 1)
  _, k = jnp.frexp(peak / X_MAX)
  e = jnp.where(peak > X_MAX, k, 0).astype(jnp.int32)
  xs = xf * lax.bitcast_convert_type((127 - e) << 23, jnp.float32)[:, None]    # exact: a power of two
  w = xs.reshape(n, d // 8, 8)
  pairs = []
  for p in range(4):
    factor = 1.0 / 16.0 if p % 2 else 1.0
    lo = lax.bitcast_convert_type((w[:, :, p] * factor).astype(jnp.float16), jnp.uint16).astype(jnp.uint32)
    hi = lax.bitcast_convert_type((w[:, :, p + 4] * factor).astype(jnp.float16), jnp.uint16).astype(jnp.uint32)
    pairs.append(lax.bitcast_convert_type(lo | (hi << 16), jnp.int32))         # [N, D/8]
  rescale = lax.bitcast_convert_type((127 + e) << 23, jnp.float32)             # 2**e
  return jnp.concatenate(pairs, axis=1), rescale


def _halves(bits):
  """int32 half2 bits -> (low, high) as float32."""
  u = lax.bitcast_convert_type(bits, jnp.uint32)
  to_f32 = lambda h: lax.bitcast_convert_type(h.astype(jnp.uint16), jnp.float16).astype(jnp.float32)
  return to_f32(u & 0xFFFF), to_f32(u >> 16)


def _reference(words, p0, p1, p2, p3):
  acc = None
  for p, bits in enumerate((p0, p1, p2, p3)):
    src = words if p < 2 else words >> 8
    shift, mult = (4, 16.0) if p % 2 else (0, 1.0)
    d_lo = (((src >> shift) & 0xF).astype(jnp.float32) - 8.0) * mult                # exact, as the HADD2 leaves it
    d_hi = (((src >> (16 + shift)) & 0xF).astype(jnp.float32) - 8.0) * mult
    a_lo, a_hi = _halves(bits)
    prod = (d_lo * a_lo, d_hi * a_hi)                                              # exact in float32
    if acc is None:
      acc = tuple(v.astype(jnp.float16).astype(jnp.float32) for v in prod)
    else:
      acc = tuple((v + a).astype(jnp.float16).astype(jnp.float32) for v, a in zip(prod, acc))
  return acc[0] + acc[1]


@int4_word_dots_f16_p.def_abstract_eval
def _abstract(words, *pairs):
  del pairs
  return jax.core.ShapedArray(words.shape, jnp.float32)


int4_word_dots_f16_p.def_impl(jax.jit(_reference))
mlir.register_lowering(int4_word_dots_f16_p, mlir.lower_fun(_reference, multiple_results=False))


def _ptx():
  """Inline PTX for one word: $0 = the float32 dot, $1 = the word, $2..$5 = activation pairs 0..3 (half2)."""
  return "\n".join([
      "{", ".reg .b32 lo, hi, w8, d0, d1, d2, d3, acc, m0, m1, k, c0, c1;", ".reg .b16 h0, h1;",
      ".reg .f32 f0, f1;",
      "mov.b32 m0, 0x000F000F;", "mov.b32 m1, 0x00F000F0;", "mov.b32 k, 0x64006400;",   # masks; half2 1024
      "mov.b32 c0, 0x64086408;", "mov.b32 c1, 0x64806480;",                              # half2 1032, 1152
      "lop3.b32 lo, $1, m0, k, 0xEA;",                    # (w & m0) | k: (1024 + n0, 1024 + n4)
      "lop3.b32 hi, $1, m1, k, 0xEA;",                    # (1024 + 16 n1, 1024 + 16 n5)
      "shr.u32 w8, $1, 8;",
      "sub.f16x2 d0, lo, c0;", "sub.f16x2 d1, hi, c1;",   # (n - 8), 16 (n - 8): exact
      "lop3.b32 lo, w8, m0, k, 0xEA;",                    # (1024 + n2, 1024 + n6)
      "lop3.b32 hi, w8, m1, k, 0xEA;",                    # (1024 + 16 n3, 1024 + 16 n7)
      "sub.f16x2 d2, lo, c0;", "sub.f16x2 d3, hi, c1;",
      "mul.rn.f16x2 acc, d0, $2;", "fma.rn.f16x2 acc, d1, $3, acc;",
      "fma.rn.f16x2 acc, d2, $4, acc;", "fma.rn.f16x2 acc, d3, $5, acc;",
      "mov.b32 {h0, h1}, acc;", "cvt.f32.f16 f0, h0;", "cvt.f32.f16 f1, h1;",
      "add.f32 $0, f0, f1;", "}"])


def _register_triton_rule():
  from jax._src.lib.triton import dialect as tt_dialect
  from jax._src.pallas.triton import lowering as triton_lowering

  asm = _ptx()

  def rule(ctx, words, *pairs):
    out_type = mlir.aval_to_ir_type(ctx.context.mlir_ctx, ctx.avals_out[0])
    return tt_dialect.elementwise_inline_asm(       # one result: the value itself
        [out_type], asm, constraints="=f,r,r,r,r,r", pure=True, packed_element=1, args=[words, *pairs])

  triton_lowering.triton_lowering_rules[int4_word_dots_f16_p] = rule


_register_triton_rule()
