"""Small test presets that keep every structural feature of K2.6: MLA with q_lora, YaRN, dense first
layers, a shared expert, group-limited noaux_tc routing and INT4 (or dense) routed experts."""
from ddtree_jax.config import DFlashConfig, Int4Quantization, ModelConfig, RopeScaling


def tiny(int4: bool = True, **overrides) -> ModelConfig:
  cfg = ModelConfig(
      vocab_size=256, hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
      q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
      intermediate_size=128, moe_intermediate_size=32, n_routed_experts=8, num_experts_per_tok=2,
      n_shared_experts=1, first_k_dense_replace=1, moe_layer_freq=1, n_group=2, topk_group=1,
      norm_topk_prob=True, routed_scaling_factor=2.5, rope_theta=50000.0,
      rope_scaling=RopeScaling(type="yarn", factor=8.0, original_max_position_embeddings=32,
                               beta_fast=32.0, beta_slow=1.0, mscale=1.0, mscale_all_dim=1.0),
      rms_norm_eps=1e-5, max_position_embeddings=512, eos_token_id=1, stop_token_ids=(1,),
      quantization=Int4Quantization(group_size=32) if int4 else None)
  return cfg.replace(**overrides).validate()


def tiny_drafter(target: ModelConfig, block_size: int = 8, **overrides) -> DFlashConfig:
  """A small DFlash drafter for `target` (Qwen3-style, GQA 4/2 heads, 2 layers)."""
  cfg = DFlashConfig(
      vocab_size=target.vocab_size, hidden_size=target.hidden_size, num_hidden_layers=2, num_attention_heads=4,
      num_key_value_heads=2, head_dim=16, intermediate_size=128, block_size=block_size,
      mask_token_id=target.vocab_size - 1,
      target_layer_ids=(0, target.num_hidden_layers - 1),
      num_target_layers=target.num_hidden_layers, rms_norm_eps=1e-6, rope_theta=1e6)
  return cfg.replace(**overrides).check_against(target)


def tiny_shardable(int4: bool = True, **overrides) -> ModelConfig:
  """`tiny` with heads (8), routed experts (16), shared and dense intermediate sizes and the vocabulary
  divisible by 8: every partition rule of ddtree_jax/sharding.py applies on meshes up to 8 devices."""
  return tiny(int4=int4, **{**dict(num_attention_heads=8, n_routed_experts=16), **overrides})


def tiny_shardable_drafter(target: ModelConfig, block_size: int = 8, **overrides) -> DFlashConfig:
  """`tiny_drafter` with 16 query / 8 KV heads of 8 dims (GQA, splittable over 8 devices)."""
  return tiny_drafter(target, block_size, **{**dict(num_attention_heads=16, num_key_value_heads=8, head_dim=8),
                                             **overrides})


def get_config():
  return tiny()
