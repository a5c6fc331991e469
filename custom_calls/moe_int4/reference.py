"""Plain-XLA routed experts (the oracle and the CPU fallback).

Tokens are sorted by expert and run through `jax.lax.ragged_dot` (grouped GEMM) with weights
dequantised from the compressed-tensors INT4 layout, then combined with the routing weights.
Supports expert parallelism: only experts in [expert_offset, expert_offset + E_local) are
computed here; (token, expert) pairs routed elsewhere contribute zero (an all-reduce over the
expert axis completes the sum).
"""
import jax
import jax.numpy as jnp

from custom_calls.moe_int4.layout import dequantize_int4


def _grouped_swiglu(x, expert_ids, expert_weights, w_gate, w_up, w_down, expert_offset):
  """x: [N, D]; expert_ids/weights: [N, K]; w_gate/w_up: [E, D, I]; w_down: [E, I, D] -> [N, D] fp32."""
  n, d = x.shape
  k = expert_ids.shape[1]
  e_local = w_gate.shape[0]
  local = expert_ids - expert_offset                              # [N, K]
  is_local = (local >= 0) & (local < e_local)
  # Non-local pairs are sent to a virtual group E_local that no weight covers (ragged_dot rows past
  # the last group produce zeros) and their weight is zeroed.
  local = jnp.where(is_local, local, e_local).reshape(-1)       # [N*K]
  order = jnp.argsort(local, stable=True)                       # [N*K]
  token_of_pair = order // k
  xs = x[token_of_pair]                                         # [N*K, D]
  group_sizes = jnp.bincount(local, length=e_local + 1)[:e_local].astype(jnp.int32)
  prec = jax.lax.Precision.HIGHEST
  gate = jax.lax.ragged_dot(xs, w_gate, group_sizes, precision=prec, preferred_element_type=jnp.float32)
  up = jax.lax.ragged_dot(xs, w_up, group_sizes, precision=prec, preferred_element_type=jnp.float32)
  h = (jax.nn.silu(gate) * up).astype(w_down.dtype)             # [N*K, I]
  y = jax.lax.ragged_dot(h, w_down, group_sizes, precision=prec, preferred_element_type=jnp.float32)
  w = jnp.where(is_local, expert_weights, 0.0).reshape(-1)[order].astype(jnp.float32)
  y = y * w[:, None]
  return jnp.zeros((n, d), jnp.float32).at[token_of_pair].add(y)


def routed_experts_dense_reference(x, expert_ids, expert_weights, w_gate, w_up, w_down, *, expert_offset=0):
  """Dense (bf16/fp32) experts. w_gate/w_up: [E, D, I]; w_down: [E, I, D]. Returns [N, D] in x.dtype."""
  y = _grouped_swiglu(x, expert_ids, expert_weights, w_gate.astype(x.dtype), w_up.astype(x.dtype),
                      w_down.astype(x.dtype), expert_offset)
  return y.astype(x.dtype)


def routed_experts_int4_reference(x, expert_ids, expert_weights, gate_packed, gate_scale, up_packed, up_scale,
                                  down_packed, down_scale, *, group_size=32, expert_offset=0):
  """INT4 experts in the compressed-tensors layout (HF [out, in] orientation).

  x: [N, D]; expert_ids: [N, K] int32 (global ids); expert_weights: [N, K] fp32
  gate_packed, up_packed: int32 [E, I, D/8]; gate_scale, up_scale: [E, I, D/group]
  down_packed: int32 [E, D, I/8];            down_scale: [E, D, I/group]
  returns [N, D] in x.dtype
  """
  dt = x.dtype
  w_gate = jnp.swapaxes(dequantize_int4(gate_packed, gate_scale, group_size=group_size, dtype=dt), 1, 2)
  w_up = jnp.swapaxes(dequantize_int4(up_packed, up_scale, group_size=group_size, dtype=dt), 1, 2)
  w_down = jnp.swapaxes(dequantize_int4(down_packed, down_scale, group_size=group_size, dtype=dt), 1, 2)
  y = _grouped_swiglu(x, expert_ids, expert_weights, w_gate, w_up, w_down, expert_offset)
  return y.astype(dt)
