"""MLA tree attention: dispatch between the XLA reference and GPU kernels."""
from custom_calls.mla_attention.reference import mla_attention_reference, visibility_mask
import jax


def mla_attention(q_lat, q_pe, ckv, kpe, cache_len, block_mask, *, scale, impl="auto"):
  """See reference.py for shapes and semantics. impl: "auto" | "xla"."""
  if impl not in ("auto", "xla"):
    raise ValueError(f"mla_attention: unknown impl {impl!r}; expected 'auto' or 'xla'")
  return mla_attention_reference(q_lat, q_pe, ckv, kpe, cache_len, block_mask, scale=scale)


__all__ = ["mla_attention", "mla_attention_reference", "visibility_mask"]
