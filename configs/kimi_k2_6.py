"""Kimi K2.6 text model (DeepSeek-V3 architecture), the numbers of ../shared/REFERENCE.md section 1."""
from ddtree_jax.config import Int4Quantization, ModelConfig, RopeScaling

KIMI_K2_6_IGNORE = ("lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*")


def kimi_k2_6() -> ModelConfig:
  return ModelConfig(
      vocab_size=163840, hidden_size=7168, num_hidden_layers=61, num_attention_heads=64,
      q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
      intermediate_size=18432, moe_intermediate_size=2048, n_routed_experts=384, num_experts_per_tok=8,
      n_shared_experts=1, first_k_dense_replace=1, moe_layer_freq=1, n_group=1, topk_group=1,
      norm_topk_prob=True, routed_scaling_factor=2.827, scoring_func="sigmoid", topk_method="noaux_tc",
      rope_theta=50000.0,
      rope_scaling=RopeScaling(type="yarn", factor=64.0, original_max_position_embeddings=4096, beta_fast=32.0,
                               beta_slow=1.0, mscale=1.0, mscale_all_dim=1.0),
      rms_norm_eps=1e-5, max_position_embeddings=262144, tie_word_embeddings=False,
      bos_token_id=163584, eos_token_id=163585, stop_token_ids=(163585, 163586),
      quantization=Int4Quantization(num_bits=4, group_size=32, ignore=KIMI_K2_6_IGNORE),
      tensor_prefix="language_model.model.", lm_head_name="language_model.lm_head.weight",
  ).validate()


def get_config():
  return kimi_k2_6()
