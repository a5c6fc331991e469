"""The embedded default model: a small Kimi K2.6-architecture code model and its DFlash drafter.

Same structure as K2.6 (MLA with q_lora, noaux_tc sigmoid router, a dense first layer, a shared expert,
routed experts quantised to INT4 group-32 at export), at a size that trains in minutes on one GPU and
ships in < 50 MB with its drafter. `tiny_*` are the CPU-test sizes of the same pipeline.
"""
from __future__ import annotations

import dataclasses

from ddtree_jax.config import DFlashConfig, Int4Quantization, ModelConfig

KIMI_IGNORE = ("lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*")

# Special tokens of the BPE tokenizer (ids 0 and 1).
EOS_TOKEN, MASK_TOKEN = "<|endoftext|>", "<|mask|>"
EOS_ID, MASK_ID = 0, 1


@dataclasses.dataclass(frozen=True)
class TargetTrain:
  """Hyper-parameters of target pretraining."""
  seq_len: int = 1024
  batch: int = 64
  lr: float = 2e-3
  min_lr_ratio: float = 0.1
  warmup_steps: int = 100
  max_steps: int = 3000            # cosine horizon; the run may stop earlier on its time budget
  weight_decay: float = 0.1
  clip: float = 1.0
  capacity_factor: float = 1.5     # routed tokens per expert slot during training (drops the overflow)
  bias_update_rate: float = 1e-3   # noaux_tc load balancing: e_score_correction_bias += rate * sign(mean - load)
  eval_every: int = 250
  eval_tokens: int = 262144
  ckpt_every: int = 500
  seed: int = 0


@dataclasses.dataclass(frozen=True)
class DrafterTrain:
  """Hyper-parameters of DFlash drafter training (REFERENCE.md section 2)."""
  seq_len: int = 512
  batch: int = 64
  blocks_per_seq: int = 32
  gamma: float = 7.0               # position weight exp(-(k-1)/gamma); 7 for block 16
  lr: float = 6e-4
  warmup_ratio: float = 0.04
  max_steps: int = 12000           # cosine horizon; the run may stop earlier on its time budget
  weight_decay: float = 0.01
  clip: float = 1.0
  eval_every: int = 250
  ckpt_every: int = 500
  seed: int = 1


def target_config(vocab_size: int = 4096) -> ModelConfig:
  return ModelConfig(
      vocab_size=vocab_size, hidden_size=256, num_hidden_layers=6, num_attention_heads=4,
      q_lora_rank=128, kv_lora_rank=128, qk_nope_head_dim=64, qk_rope_head_dim=32, v_head_dim=64,
      intermediate_size=768, moe_intermediate_size=256, n_routed_experts=16, num_experts_per_tok=2,
      n_shared_experts=1, first_k_dense_replace=1, moe_layer_freq=1, n_group=1, topk_group=1,
      norm_topk_prob=True, routed_scaling_factor=1.0, scoring_func="sigmoid", topk_method="noaux_tc",
      rope_theta=10000.0, rms_norm_eps=1e-5, max_position_embeddings=1024, tie_word_embeddings=False,
      bos_token_id=EOS_ID, eos_token_id=EOS_ID, stop_token_ids=(EOS_ID,),
      quantization=None,
  ).validate()


def int4(cfg: ModelConfig) -> ModelConfig:
  """The same model with INT4 group-32 routed experts (what is exported)."""
  return cfg.replace(quantization=Int4Quantization(num_bits=4, group_size=32, ignore=KIMI_IGNORE)).validate()


def drafter_config(target: ModelConfig, *, num_layers: int = 5, block_size: int = 16,
                   target_layer_ids: tuple[int, ...] = (1, 3, 5)) -> DFlashConfig:
  return DFlashConfig(
      vocab_size=target.vocab_size, hidden_size=target.hidden_size, num_hidden_layers=num_layers,
      num_attention_heads=4, num_key_value_heads=2, head_dim=64, intermediate_size=768,
      block_size=block_size, mask_token_id=MASK_ID, target_layer_ids=tuple(target_layer_ids),
      num_target_layers=target.num_hidden_layers, rms_norm_eps=1e-6, rope_theta=10000.0,
      max_position_embeddings=target.max_position_embeddings,
  ).check_against(target)


# ---- CPU-test sizes -----------------------------------------------------------------------------

def tiny_target_config(vocab_size: int = 512) -> ModelConfig:
  return target_config(vocab_size).replace(
      hidden_size=64, num_hidden_layers=3, num_attention_heads=2, q_lora_rank=32, kv_lora_rank=32,
      qk_nope_head_dim=16, qk_rope_head_dim=16, v_head_dim=16, intermediate_size=128, moe_intermediate_size=64,
      n_routed_experts=4, num_experts_per_tok=2, max_position_embeddings=256).validate()


def tiny_drafter_config(target: ModelConfig, *, num_layers: int = 1) -> DFlashConfig:
  return drafter_config(target, num_layers=num_layers, block_size=8, target_layer_ids=(0, 2)).replace(
      num_attention_heads=2, num_key_value_heads=1, head_dim=32, intermediate_size=128).check_against(target)


def tiny_target_train() -> TargetTrain:
  return TargetTrain(seq_len=128, batch=4, lr=3e-3, warmup_steps=5, max_steps=40, eval_every=20,
                     eval_tokens=4096, ckpt_every=20)


def tiny_drafter_train() -> DrafterTrain:
  return DrafterTrain(seq_len=128, batch=4, blocks_per_seq=4, gamma=4.0, lr=3e-3, max_steps=30,
                      eval_every=15, ckpt_every=15)


PRESETS = {
    "default": (target_config, drafter_config, TargetTrain, DrafterTrain),
    "tiny": (tiny_target_config, tiny_drafter_config, tiny_target_train, tiny_drafter_train),
}


def get_config():
  return target_config()
