"""Routed experts (INT4 compressed-tensors or dense): dispatch between the XLA reference and GPU kernels."""
from custom_calls.moe_int4.reference import routed_experts_dense_reference, routed_experts_int4_reference


def routed_experts_int4(x, expert_ids, expert_weights, gate_packed, gate_scale, up_packed, up_scale,
                        down_packed, down_scale, *, group_size=32, expert_offset=0, impl="auto"):
  """See reference.py for shapes. impl: "auto" | "xla"."""
  if impl not in ("auto", "xla"):
    raise ValueError(f"routed_experts_int4: unknown impl {impl!r}; expected 'auto' or 'xla'")
  return routed_experts_int4_reference(x, expert_ids, expert_weights, gate_packed, gate_scale, up_packed, up_scale,
                                       down_packed, down_scale, group_size=group_size, expert_offset=expert_offset)


def routed_experts_dense(x, expert_ids, expert_weights, w_gate, w_up, w_down, *, expert_offset=0):
  """Dense experts. w_gate/w_up: [E, D, I]; w_down: [E, I, D]."""
  return routed_experts_dense_reference(x, expert_ids, expert_weights, w_gate, w_up, w_down,
                                        expert_offset=expert_offset)


__all__ = ["routed_experts_int4", "routed_experts_dense",
           "routed_experts_int4_reference", "routed_experts_dense_reference"]
