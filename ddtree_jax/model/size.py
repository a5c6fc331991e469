"""Parameter counts and checkpoint bytes of a target config, computed from the config alone."""
from __future__ import annotations

import dataclasses

from ddtree_jax.config import ModelConfig


@dataclasses.dataclass(frozen=True)
class SizeReport:
  total_params: int
  active_params_per_token: int
  routed_expert_params: int
  bytes_on_disk: int           # INT4 experts at 4 bits + a bf16 scale per group; everything else bf16 (bias fp32)
  latent_cache_bytes_per_token: int   # bf16

  def lines(self) -> list[str]:
    return [f"total parameters:        {self.total_params / 1e9:,.1f} B",
            f"active per token:        {self.active_params_per_token / 1e9:,.1f} B",
            f"routed expert params:    {self.routed_expert_params / 1e9:,.1f} B",
            f"checkpoint bytes:        {self.bytes_on_disk / 1e9:,.1f} GB ({self.bytes_on_disk / 2**30:,.1f} GiB)",
            f"latent cache per token:  {self.latent_cache_bytes_per_token:,} B"]


def size_report(cfg: ModelConfig) -> SizeReport:
  d, h = cfg.hidden_size, cfg.num_attention_heads
  q = (d * cfg.q_lora_rank + cfg.q_lora_rank + cfg.q_lora_rank * h * cfg.qk_head_dim) if cfg.q_lora_rank \
      else d * h * cfg.qk_head_dim
  attn = (q + d * cfg.latent_dim + cfg.kv_lora_rank + cfg.kv_lora_rank * h * (cfg.qk_nope_head_dim + cfg.v_head_dim)
          + h * cfg.v_head_dim * d)
  norms = 2 * d
  dense_mlp = 3 * d * cfg.intermediate_size
  expert = 3 * d * cfg.moe_intermediate_size
  shared = expert * cfg.n_shared_experts
  router = d * cfg.n_routed_experts
  bias = cfg.n_routed_experts
  n_moe = sum(cfg.is_moe_layer(i) for i in range(cfg.num_hidden_layers))
  n_dense = cfg.num_hidden_layers - n_moe
  embed = cfg.vocab_size * d * (1 if cfg.tie_word_embeddings else 2)
  routed = n_moe * cfg.n_routed_experts * expert
  bf16_params = (cfg.num_hidden_layers * (attn + norms) + n_dense * dense_mlp + n_moe * (shared + router)
                 + embed + d)
  total = bf16_params + routed + n_moe * bias
  active = bf16_params + n_moe * (cfg.num_experts_per_tok * expert + bias)
  if cfg.experts_int4:
    g = cfg.quantization.group_size
    routed_bytes = routed // 2 + (routed // g) * 2
  else:
    routed_bytes = routed * 2
  on_disk = bf16_params * 2 + routed_bytes + n_moe * bias * 4
  return SizeReport(total_params=total, active_params_per_token=active, routed_expert_params=routed,
                    bytes_on_disk=on_disk, latent_cache_bytes_per_token=cfg.num_hidden_layers * cfg.latent_dim * 2)
