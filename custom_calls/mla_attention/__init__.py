"""MLA tree attention: dispatch between the XLA reference and GPU kernels.

Kernels: pallas_triton.py (dispatched on GPUs); mosaic_gpu.py (EXPERIMENTAL, not dispatched: a Hopper wgmma
kernel with two warpgroups for the compute-bound trees, checked on the CPU in Mosaic GPU interpret mode and by
lowering, not yet compiled or timed on a GPU).
"""
import jax

from custom_calls.mla_attention.reference import mla_attention_reference, visibility_mask

_IMPLS = ("auto", "xla", "pallas", "pallas_interpret")


def mla_attention(q_lat, q_pe, ckv, kpe, cache_len, block_mask, *, scale, impl="auto"):
  """See reference.py for shapes and semantics.

  impl: "auto" (the Pallas Triton kernel on GPU backends for supported shapes, else the XLA reference),
  "xla" (the reference), "pallas" (the Triton kernel; GPU), "pallas_interpret" (the same kernel run by
  the Pallas interpreter, for CPU tests).
  """
  if impl not in _IMPLS:
    raise ValueError(f"mla_attention: unknown impl {impl!r}; expected one of {_IMPLS}")
  if impl == "xla":
    return mla_attention_reference(q_lat, q_pe, ckv, kpe, cache_len, block_mask, scale=scale)
  from custom_calls.mla_attention import pallas_triton  # imported lazily: Pallas is not needed for "xla"
  if impl == "auto":
    if jax.default_backend() != "gpu" or not pallas_triton.supported(q_lat, q_pe, ckv, kpe):
      return mla_attention_reference(q_lat, q_pe, ckv, kpe, cache_len, block_mask, scale=scale)
  elif not pallas_triton.supported(q_lat, q_pe, ckv, kpe):
    raise ValueError(
        f"mla_attention(impl={impl!r}): unsupported shapes/dtypes q_lat {q_lat.shape} {q_lat.dtype}, "
        f"q_pe {q_pe.shape}, ckv {ckv.shape} {ckv.dtype} (need power-of-two R and P >= 16, matching dtypes)")
  return pallas_triton.mla_attention_pallas(q_lat, q_pe, ckv, kpe, cache_len, block_mask, scale=scale,
                                            interpret=(impl == "pallas_interpret"))


__all__ = ["mla_attention", "mla_attention_reference", "visibility_mask"]
