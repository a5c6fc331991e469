"""MLA tree attention: dispatch between the XLA reference and the GPU kernels.

Kernels: pallas_triton.py (any shape on GPUs: decode with a few heads, small models); mosaic_gpu.py (Hopper
wgmma, two warpgroups, sm_90 only; K2.6 dimensions only: R 512, P 64, bf16, S a multiple of 128) for 64 query rows
(T x H) or more: trees, blocks and decode with 64 heads. On the H200 it beat the Triton kernel at every such shape
timed (benchmarks/RESULTS.md, issue 6 eighth and ninth rounds): 1 x 257 x 64 heads x 32K 1.85 ms against 4.60,
8 x 16 x 64 x 4K 0.135 against 0.328, 1 x 64 x 8 x 32K 0.086 against 0.170; decode 1 x 1 x 64 x 128K 0.062 against
0.104, 1 x 1 x 64 x 32K 0.035 against 0.048. Decode with 8 heads (8 rows) stays on Triton: 1 x 1 x 8 x 128K 0.056
against Mosaic's 0.063 (its 64-row tile would be 7/8 padding). Both kernels split the keys and combine the splits
with split_combine.py (one Pallas Triton launch; its XLA form is the reference).
"""
import jax

from custom_calls.mla_attention.reference import mla_attention_reference, visibility_mask

_IMPLS = ("auto", "xla", "pallas", "pallas_interpret", "mosaic", "mosaic_interpret")
MOSAIC_MIN_ROWS = 64   # T x H from which "auto" runs the Mosaic GPU kernel (one full 64-row tile)


def select_kernel(q_lat, q_pe, ckv, kpe, cache_len, block_mask, *, impl="auto"):
  """The implementation mla_attention runs for these shapes (arrays or jax.ShapeDtypeStruct) and impl:
  "mosaic", "mosaic_interpret", "pallas" (the Triton kernel), "pallas_interpret" or "xla".

  impl: "auto" (on GPU backends: the Mosaic GPU kernel on Hopper GPUs for T x H >= MOSAIC_MIN_ROWS where it
  supports the shapes, except at most 128 rows in the batch (B x T x H) over a buffer of at most 4K keys, 12K at
  64 rows in the batch (pallas_triton.is_short_wide_decode), else the Pallas Triton kernel where it supports them,
  else the XLA reference), or one of the others, returned as is (for "pallas" and "pallas_interpret" a ValueError
  names shapes the Triton kernel does not support).
  """
  if impl not in _IMPLS:
    raise ValueError(f"mla_attention: unknown impl {impl!r}; expected one of {_IMPLS}")
  if impl == "xla":
    return "xla"
  # imported lazily: Pallas is not needed for "xla"
  from custom_calls.mla_attention import mosaic_gpu, pallas_triton
  args = (q_lat, q_pe, ckv, kpe, cache_len, block_mask)
  if impl == "auto":
    if jax.default_backend() != "gpu":
      return "xla"
    rows = q_lat.shape[1] * q_lat.shape[2]
    triton_ok = pallas_triton.supported(q_lat, q_pe, ckv, kpe)
    triton_faster = triton_ok and pallas_triton.is_short_wide_decode(q_lat.shape[0], rows, ckv.shape[1])
    if (rows >= MOSAIC_MIN_ROWS and not triton_faster and mosaic_gpu.device_supported()
        and mosaic_gpu.supported(*args)):
      return "mosaic"
    return "pallas" if triton_ok else "xla"
  if impl in ("mosaic", "mosaic_interpret"):
    return impl     # mla_attention_mosaic raises a clear error for shapes it does not support
  if not pallas_triton.supported(q_lat, q_pe, ckv, kpe):
    raise ValueError(
        f"mla_attention(impl={impl!r}): unsupported shapes/dtypes q_lat {q_lat.shape} {q_lat.dtype}, "
        f"q_pe {q_pe.shape}, ckv {ckv.shape} {ckv.dtype} (need power-of-two R and P >= 16, matching dtypes)")
  return impl


def mla_attention(q_lat, q_pe, ckv, kpe, cache_len, block_mask, *, scale, impl="auto"):
  """See reference.py for shapes and semantics; impl: see select_kernel ("auto", "xla", "pallas" (the Triton
  kernel; GPU), "pallas_interpret" (the Triton kernel run by the Pallas interpreter, for CPU tests), "mosaic" (the
  Mosaic GPU kernel; Hopper GPU), "mosaic_interpret" (the Mosaic GPU kernel in Mosaic GPU interpret mode, for CPU
  tests)).
  """
  args = (q_lat, q_pe, ckv, kpe, cache_len, block_mask)
  kernel = select_kernel(*args, impl=impl)
  if kernel == "xla":
    return mla_attention_reference(*args, scale=scale)
  from custom_calls.mla_attention import mosaic_gpu, pallas_triton
  if kernel.startswith("mosaic"):
    return mosaic_gpu.mla_attention_mosaic(*args, scale=scale, interpret=(kernel == "mosaic_interpret"))
  return pallas_triton.mla_attention_pallas(*args, scale=scale, interpret=(kernel == "pallas_interpret"))


__all__ = ["mla_attention", "select_kernel", "mla_attention_reference", "visibility_mask"]
