"""The noaux_tc router of DeepSeek-V3 / Kimi K2.

1. s = sigmoid(x @ Wg^T) in fp32.
2. Selection score = s + e_score_correction_bias (the bias only chooses experts).
3. Group-limited: a group's score is the sum of its top-2 selection scores; keep `topk_group` groups.
4. Top-k experts on the selection score within the kept groups.
5. Weights = the unbiased s of the chosen experts, divided by their sum (+1e-20) when
   norm_topk_prob, times routed_scaling_factor.
"""
import jax
import jax.numpy as jnp
from flax import nnx

from ddtree_jax.config import ModelConfig


def noaux_tc_route(logits, bias, *, top_k: int, n_group: int, topk_group: int, norm_topk_prob: bool,
                   routed_scaling_factor: float):
  """logits: [N, E] fp32; bias: [E] fp32 -> (ids [N, K] int32, weights [N, K] fp32)."""
  n, e = logits.shape
  scores = jax.nn.sigmoid(logits.astype(jnp.float32))
  choice = scores + bias.astype(jnp.float32)[None, :]
  if n_group > 1:
    grouped = choice.reshape(n, n_group, e // n_group)
    group_scores = jnp.sum(jax.lax.top_k(grouped, 2)[0], axis=-1)          # [N, G]
    _, keep = jax.lax.top_k(group_scores, topk_group)                        # [N, topk_group]
    group_mask = jnp.zeros((n, n_group), bool).at[jnp.arange(n)[:, None], keep].set(True)
    expert_mask = jnp.repeat(group_mask, e // n_group, axis=1)              # [N, E]
    choice = jnp.where(expert_mask, choice, -jnp.inf)
  _, ids = jax.lax.top_k(choice, top_k)
  weights = jnp.take_along_axis(scores, ids, axis=1)
  if norm_topk_prob:
    weights = weights / (jnp.sum(weights, axis=-1, keepdims=True) + 1e-20)
  return ids.astype(jnp.int32), weights * routed_scaling_factor


class Router(nnx.Module):
  def __init__(self, cfg: ModelConfig, *, dtype, rngs: nnx.Rngs):
    self.cfg = cfg
    self.kernel = nnx.Param(nnx.initializers.normal(0.02)(rngs.params(), (cfg.hidden_size, cfg.n_routed_experts), dtype))
    self.e_score_correction_bias = nnx.Param(jnp.zeros((cfg.n_routed_experts,), jnp.float32))

  def __call__(self, x):
    """x: [N, D] -> ids [N, K], weights [N, K]."""
    cfg = self.cfg
    logits = jnp.dot(x.astype(jnp.float32), self.kernel[...].astype(jnp.float32))
    return noaux_tc_route(logits, self.e_score_correction_bias[...], top_k=cfg.num_experts_per_tok,
                          n_group=cfg.n_group, topk_group=cfg.topk_group, norm_topk_prob=cfg.norm_topk_prob,
                          routed_scaling_factor=cfg.routed_scaling_factor)
