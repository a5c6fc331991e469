"""Routed experts (INT4 compressed-tensors or dense): dispatch between the XLA reference and GPU kernels.

API for the model: load the expert arrays once (optionally through `repack`, which validates them and
returns an `Int4Experts` tuple in the order of the arguments below), then call
`routed_experts_int4(x, ids, weights, *experts, expert_offset=..., impl="auto")` per layer.

Not dispatched: mosaic_experts.py (tensor cores for 1-16 tokens, Pallas Mosaic GPU, its own load-time layout
mosaic_layout.py; correct on the H200 but no faster, issue 6 seventeenth round) and mosaic_down_prewait.py (the
gemv's gate/up kernel, then a Mosaic GPU down kernel that reads its expert's words before its dependent-launch wait;
the down words in mosaic_layout.py's layout; CPU-tested, not yet timed: benchmarks/results/issue6_r45/call1.sh).
"""
import jax

from custom_calls.moe_int4.k_chunks import (check_scales, experts_to_k_chunks, from_k_chunks, kernel_chunk_fits,
                                            to_k_chunks)
from custom_calls.moe_int4.reference import routed_experts_dense_reference, routed_experts_int4_reference
from custom_calls.moe_int4.repack import Int4Experts, repack

_IMPLS = ("auto", "xla", "pallas", "pallas_interpret")
# Up to this many tokens the few-token kernels (pallas_gemv.py: column-tile programs, CUDA-core dequantisation)
# run; above it the grouped tensor-core kernels (pallas_triton.py, bf16 planes). H200 (benchmarks/RESULTS.md,
# issue 6 sixth round, queued samples), gemv (pairs split `tokens` ways) vs grouped: 1 token 0.025 vs 0.084 ms,
# 2: 0.039 vs 0.094, 4: 0.070 vs 0.103, 8: 0.124 vs 0.129 (a tie within the runs' spread, so the bound
# stayed at 6). Twelfth round, k-chunked, the grouped kernels with their 32 / 64 tiles: 6 tokens 0.093-0.094 vs
# 0.098-0.099, 8 tokens 0.119-0.121 vs 0.104-0.105 (calls 3-4), so the bound is still 6. Fifteenth round (call 4),
# the gemv with 4 warps and unrolled pairs at 8 tokens: 0.111 vs the grouped 0.105, so still 6. Twenty-seventh round
# (H100, k-chunked): both of the gemv's parts in one launch (pallas_gemv_pipelined.py) at 8 tokens 100.6 us against
# the grouped 107.6, so 8. Twenty-ninth round (H100, k-chunked): the grouped kernels in one launch
# (pallas_triton_pipelined.py) at 8 tokens 96.2 / 96.4 us against the one-launch gemv's 99.1 / 100.2, at 7 tokens 86.8
# against 87.7, at 6 tokens 83.1 against 82.4, so 6.
GEMV_MAX_TOKENS = 6
# From this many tokens up to GEMV_MAX_TOKENS the gemv's two parts run in one launch (pallas_gemv_pipelined.py).
# H100, k-chunked (issue 6 twenty-seventh round), one launch against two: 4 tokens 57.6 vs 59.6 us, 6 tokens
# 79.4-79.8 vs 81.9-83.7; 2 tokens 35.7 vs 35.1 and 1 token 35.0 vs 20.7, so two launches below 4. Twenty-eighth
# round (H100, k-chunked, two runs): 2 tokens 36.6 / 36.5 vs 33.5 / 34.1; 3 tokens 44.6 / 51.3 vs 49.3 / 49.6 (the
# two runs disagree), against pallas_gemv's new default below, so still 4. Below it pallas_gemv's defaults skip XLA's
# pair compaction at 2-3 tokens (pallas_gemv.default_uncompacted_pairs). Thirty-sixth round (H100, k-chunked, two
# runs), since planes_consts removed the one-launch kernel's counter copy: 3 tokens 37.9 / 38.6 us of kernel time
# against 45.9 / 45.8 (42.4 / 43.3 us per call against 49.1 / 51.8; stored layout 41.4 against 46.8), so 3.
# Thirty-seventh round (H100, k-chunked, kernel time, three runs): 2 tokens 29.2 / 29.4 / 29.3 us against two
# launches' 30.4 / 30.3 / 30.4, so 2. One token stays on two launches (35.0 against 20.7 in round 27).
ONE_LAUNCH_MIN_TOKENS = 2
# Above GEMV_MAX_TOKENS and up to this many tokens the grouped kernels' two parts run in one launch
# (pallas_triton_pipelined.py); above it the two launches of pallas_triton.py. H100, k-chunked 256, us per call
# (issue 6 twenty-ninth round), one launch against two: 10 tokens 107.5 / 107.4 vs 116.2 / 116.5; 12: 119.1 / 118.4 vs
# 132.9 / 133.2; 16: 155.8 / 156.5 vs 158.2 / 157.5; 24: 201.6 vs 247.7; 32: 227.3 / 228.9 vs 263.7 / 262.5; 48:
# 305.5 vs 323.6; 64: 349.2 vs 393.4; 128: 438.6 vs 451.0; 512: 489.2 vs 515.8; then ties: 1024: 591.1 vs 592.1,
# 2048: 1108.3 vs 1109.0, 4096: 1822.0 vs 1810.8.
GROUPED_ONE_LAUNCH_MAX_TOKENS = 512
# The k-chunk size of the layout the model gives the kernels on a GPU (k_chunks.py; ddtree_jax/model/experts.py
# use_k_chunks): the grouped kernels' K step, so that each of their tiles is one contiguous block. H200, issue 6
# tenth round: block_n 128 on chunk 256 runs 16-512 tokens at 0.90-1.03 of the roofline; chunk 512 or 1024 under
# the same 256-input tiles ran slower than the stored layout.
KERNEL_K_CHUNK = 256


def routed_experts_int4(x, expert_ids, expert_weights, gate_packed, gate_scale, up_packed, up_scale,
                        down_packed, down_scale, *, group_size=32, expert_offset=0, impl="auto"):
  """See reference.py for shapes. Words and scales may be in the stored layout or k-chunked (k_chunks.py).

  impl: "auto" (the Pallas Triton kernels on GPU backends for supported shapes, else the XLA reference;
  pallas_gemv for up to GEMV_MAX_TOKENS tokens, in one launch (pallas_gemv_pipelined) from ONE_LAUNCH_MIN_TOKENS;
  the grouped kernels above, in one launch (pallas_triton_pipelined) up to GROUPED_ONE_LAUNCH_MAX_TOKENS, also at
  fewer tokens where pallas_gemv does not take the shapes),
  "xla", "pallas" (GPU), "pallas_interpret" (the kernel under the Pallas interpreter, for CPU tests).
  """
  if impl not in _IMPLS:
    raise ValueError(f"routed_experts_int4: unknown impl {impl!r}; expected one of {_IMPLS}")
  args = (x, expert_ids, expert_weights, gate_packed, gate_scale, up_packed, up_scale, down_packed, down_scale)

  def reference():                               # the XLA reference reads the stored layout
    if gate_packed.ndim == 4 or down_packed.ndim == 4:
      check_scales("routed_experts_int4", gate_packed, gate_scale, up_scale, down_packed, down_scale, group_size)
    stored = args[:3]
    for packed, scale in ((gate_packed, gate_scale), (up_packed, up_scale), (down_packed, down_scale)):
      stored += from_k_chunks(packed, scale) if packed.ndim == 4 else (packed, scale)
    return routed_experts_int4_reference(*stored, group_size=group_size, expert_offset=expert_offset)

  if impl == "xla":
    return reference()
  from custom_calls.moe_int4 import pallas_triton  # lazily: Pallas is not needed for "xla"
  ok = pallas_triton.supported(x, gate_packed, down_packed, group_size)
  if impl == "auto" and (jax.default_backend() != "gpu" or not ok):
    return reference()
  if not ok:
    raise ValueError(
        f"routed_experts_int4(impl={impl!r}): unsupported shapes/dtypes x {x.shape} {x.dtype}, gate_packed "
        f"{gate_packed.shape}, down_packed {down_packed.shape}, group_size {group_size} "
        "(need D % 256 == 0, I % 128 == 0, power-of-two group size 8..128, k-chunks of a multiple of 128 inputs)")
  interpret = impl == "pallas_interpret"
  from custom_calls.moe_int4 import pallas_gemv
  if x.shape[0] <= GEMV_MAX_TOKENS and pallas_gemv.supported(x, gate_packed, down_packed, group_size):
    if x.shape[0] >= ONE_LAUNCH_MIN_TOKENS:
      from custom_calls.moe_int4.pallas_gemv_pipelined import routed_experts_int4_gemv_pipelined
      return routed_experts_int4_gemv_pipelined(*args, expert_offset, group_size=group_size, interpret=interpret)
    return pallas_gemv.routed_experts_int4_gemv(*args, expert_offset, group_size=group_size, interpret=interpret)
  if x.shape[0] <= GROUPED_ONE_LAUNCH_MAX_TOKENS:
    from custom_calls.moe_int4.pallas_triton_pipelined import routed_experts_int4_grouped_one_launch
    return routed_experts_int4_grouped_one_launch(*args, expert_offset, group_size=group_size, interpret=interpret)
  return pallas_triton.routed_experts_int4_pallas(*args, expert_offset, group_size=group_size, interpret=interpret)


def routed_experts_dense(x, expert_ids, expert_weights, w_gate, w_up, w_down, *, expert_offset=0):
  """Dense experts. w_gate/w_up: [E, D, I]; w_down: [E, I, D]."""
  return routed_experts_dense_reference(x, expert_ids, expert_weights, w_gate, w_up, w_down,
                                        expert_offset=expert_offset)


__all__ = ["KERNEL_K_CHUNK", "to_k_chunks", "experts_to_k_chunks", "from_k_chunks", "kernel_chunk_fits",
           "routed_experts_int4", "routed_experts_dense",
           "routed_experts_int4_reference", "routed_experts_dense_reference", "repack", "Int4Experts"]
