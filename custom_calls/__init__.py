"""Performance-critical ops of the engine.

Each op is one package with a plain-XLA reference (the CPU fallback and the test oracle), GPU
implementations, and one dispatch function that picks by backend and shape. Model code calls only
the dispatch functions exported here. This package never imports `ddtree_jax`.
"""
from custom_calls.mla_attention import mla_attention
from custom_calls.moe_int4 import routed_experts_int4, routed_experts_dense
from custom_calls.moe_int4.layout import (
    dequantize_int4,
    pack_int4,
    quantize_int4,
    unpack_int4,
)

__all__ = [
    "mla_attention",
    "routed_experts_int4",
    "routed_experts_dense",
    "dequantize_int4",
    "pack_int4",
    "quantize_int4",
    "unpack_int4",
]
