"""Small checkpoints written in exactly the published layouts (for tests and benchmarks).

- `layout="k26"`: Kimi K2.5/K2.6 multimodal repo: top-level `architectures=["KimiK25ForConditionalGeneration"]`,
  the text model under `text_config` (with its compressed-tensors `quantization_config`), a `vision_config`,
  tensors under `language_model.model.` / `language_model.lm_head.weight`, plus `vision_tower.*` and
  `mm_projector.*` tensors that the text engine must skip.
- `layout="k2"`: text-only Kimi K2 / DeepSeek-V3: flat config, tensors under `model.` / `lm_head.weight`.
Routed experts are INT4 pack-quantized (`weight_packed` int32 [out, in/8], `weight_scale` bf16
[out, in/32], `weight_shape` int32 [2]) when the config has a quantization, else bf16 `.weight` per expert.
`e_score_correction_bias` is fp32; everything else bf16 (or `float_dtype`). Several shards + an index.
"""
from __future__ import annotations

import math
import os
from typing import Any, Iterator, Optional

import ml_dtypes
import numpy as np

from custom_calls.moe_int4.layout import quantize_int4
from ddtree_jax.checkpoint.drafter_config import DrafterConfig
from ddtree_jax.checkpoint.safetensors_reader import write_index, write_safetensors
from ddtree_jax.config import ModelConfig

BF16 = np.dtype(ml_dtypes.bfloat16)


def _rope_dict(cfg) -> Optional[dict[str, Any]]:
  rs = cfg.rope_scaling
  if rs.type != "yarn":
    return None
  return {"type": "yarn", "factor": rs.factor, "original_max_position_embeddings": rs.original_max_position_embeddings,
          "beta_fast": rs.beta_fast, "beta_slow": rs.beta_slow, "mscale": rs.mscale, "mscale_all_dim": rs.mscale_all_dim}


def quantization_config(cfg: ModelConfig) -> Optional[dict[str, Any]]:
  if cfg.quantization is None:
    return None
  return {
      "quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
      "config_groups": {"group_0": {
          "targets": ["Linear"], "input_activations": None, "output_activations": None,
          "weights": {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group",
                      "group_size": cfg.quantization.group_size, "dynamic": False, "actorder": None,
                      "observer": "minmax", "block_structure": None}}},
      "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", r"re:.*mlp\.(gate|up|gate_up|down)_proj.*"],
      "kv_cache_scheme": None, "sparsity_config": {},
  }


def hf_text_config(cfg: ModelConfig) -> dict[str, Any]:
  d = {
      "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
      "vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size, "num_hidden_layers": cfg.num_hidden_layers,
      "num_attention_heads": cfg.num_attention_heads, "num_key_value_heads": cfg.num_attention_heads,
      "q_lora_rank": cfg.q_lora_rank, "kv_lora_rank": cfg.kv_lora_rank, "qk_nope_head_dim": cfg.qk_nope_head_dim,
      "qk_rope_head_dim": cfg.qk_rope_head_dim, "v_head_dim": cfg.v_head_dim,
      "intermediate_size": cfg.intermediate_size, "moe_intermediate_size": cfg.moe_intermediate_size,
      "n_routed_experts": cfg.n_routed_experts, "num_experts_per_tok": cfg.num_experts_per_tok,
      "n_shared_experts": cfg.n_shared_experts, "first_k_dense_replace": cfg.first_k_dense_replace,
      "moe_layer_freq": cfg.moe_layer_freq, "n_group": cfg.n_group, "topk_group": cfg.topk_group,
      "norm_topk_prob": cfg.norm_topk_prob, "routed_scaling_factor": cfg.routed_scaling_factor,
      "scoring_func": cfg.scoring_func, "topk_method": cfg.topk_method, "hidden_act": "silu",
      "rope_theta": cfg.rope_theta, "rope_scaling": _rope_dict(cfg), "rms_norm_eps": cfg.rms_norm_eps,
      "max_position_embeddings": cfg.max_position_embeddings, "tie_word_embeddings": cfg.tie_word_embeddings,
      "bos_token_id": cfg.bos_token_id, "eos_token_id": cfg.eos_token_id, "num_nextn_predict_layers": 0,
      "attention_bias": False, "torch_dtype": "bfloat16", "use_cache": True,
  }
  return d


def hf_target_config(cfg: ModelConfig, layout: str = "k26") -> dict[str, Any]:
  text = hf_text_config(cfg)
  q = quantization_config(cfg)
  if layout == "k2":
    if q:
      text["quantization_config"] = q
    return text
  if layout != "k26":
    raise ValueError(f"layout must be 'k26' or 'k2', got {layout!r}")
  if q:
    text["quantization_config"] = q
  return {
      "architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
      "auto_map": {"AutoConfig": "configuration_kimi_k25.KimiK25Config",
                   "AutoModel": "modeling_kimi_k25.KimiK25ForConditionalGeneration"},
      "text_config": text,
      "vision_config": {"model_type": "moonvit", "hidden_size": 32, "num_hidden_layers": 1,
                        "num_attention_heads": 2, "patch_size": 14, "merge_kernel_size": [2, 2]},
      "media_placeholder_token_id": cfg.vocab_size - 2, "pad_token_id": cfg.vocab_size - 1,
      "bos_token_id": cfg.bos_token_id, "eos_token_id": cfg.eos_token_id, "torch_dtype": "bfloat16",
  }


def _hf_prefixes(layout):
  return ("language_model.model.", "language_model.lm_head.weight") if layout == "k26" else ("model.", "lm_head.weight")


class _Rand:
  def __init__(self, seed, float_dtype):
    self.rng = np.random.default_rng(seed)
    self.dt = np.dtype(float_dtype)

  def lin(self, out, inp, gain=1.0):
    return (self.rng.standard_normal((out, inp), np.float32) * (gain / math.sqrt(inp))).astype(self.dt)

  def norm(self, n):
    return (1.0 + 0.1 * self.rng.standard_normal(n, np.float32)).astype(self.dt)


def target_groups(cfg: ModelConfig, layout: str = "k26", seed: int = 0, float_dtype=BF16
                  ) -> Iterator[list[tuple[str, np.ndarray]]]:
  """Yields the HF tensors group by group (embedding, each layer, final norm + lm_head)."""
  p, head = _hf_prefixes(layout)
  r = _Rand(seed, float_dtype)
  d, h, v = cfg.hidden_size, cfg.num_attention_heads, cfg.vocab_size
  yield [(p + "embed_tokens.weight", r.lin(v, d, math.sqrt(d)))]
  for i in range(cfg.num_hidden_layers):
    t, lp = [], f"{p}layers.{i}."
    t += [(lp + "input_layernorm.weight", r.norm(d)), (lp + "post_attention_layernorm.weight", r.norm(d))]
    a = lp + "self_attn."
    if cfg.q_lora_rank:
      t += [(a + "q_a_proj.weight", r.lin(cfg.q_lora_rank, d)), (a + "q_a_layernorm.weight", r.norm(cfg.q_lora_rank)),
            (a + "q_b_proj.weight", r.lin(h * cfg.qk_head_dim, cfg.q_lora_rank, 1.5))]
    else:
      t += [(a + "q_proj.weight", r.lin(h * cfg.qk_head_dim, d, 1.5))]
    t += [(a + "kv_a_proj_with_mqa.weight", r.lin(cfg.latent_dim, d, 1.5)),
          (a + "kv_a_layernorm.weight", r.norm(cfg.kv_lora_rank)),
          (a + "kv_b_proj.weight", r.lin(h * (cfg.qk_nope_head_dim + cfg.v_head_dim), cfg.kv_lora_rank)),
          (a + "o_proj.weight", r.lin(d, h * cfg.v_head_dim, 0.7))]
    m = lp + "mlp."
    if not cfg.is_moe_layer(i):
      n = cfg.intermediate_size
      t += [(m + "gate_proj.weight", r.lin(n, d)), (m + "up_proj.weight", r.lin(n, d)),
            (m + "down_proj.weight", r.lin(d, n, 0.7))]
    else:
      e_n, n = cfg.n_routed_experts, cfg.moe_intermediate_size
      t += [(m + "gate.weight", r.lin(e_n, d, 2.0)),
            (m + "gate.e_score_correction_bias", (0.1 * r.rng.standard_normal(e_n)).astype(np.float32))]
      for e in range(e_n):
        for w, (o, k, gain) in {"gate": (n, d, 1.0), "up": (n, d, 1.0), "down": (d, n, 0.5)}.items():
          name = f"{m}experts.{e}.{w}_proj."
          wt = r.lin(o, k, gain)
          if cfg.experts_int4:
            packed, scale = quantize_int4(wt.astype(np.float32), group_size=cfg.quantization.group_size)
            t += [(name + "weight_packed", packed), (name + "weight_scale", np.asarray(scale).astype(BF16)),
                  (name + "weight_shape", np.array([o, k], np.int32))]
          else:
            t += [(name + "weight", wt)]
      if cfg.n_shared_experts:
        s = n * cfg.n_shared_experts
        t += [(m + "shared_experts.gate_proj.weight", r.lin(s, d)), (m + "shared_experts.up_proj.weight", r.lin(s, d)),
              (m + "shared_experts.down_proj.weight", r.lin(d, s, 0.5))]
    yield t
  yield [(p + "norm.weight", r.norm(d)), (head, r.lin(v, d, 3.0))]


def vision_tensors(seed: int = 0) -> list[tuple[str, np.ndarray]]:
  r = _Rand(seed + 99, BF16)
  return [("vision_tower.patch_embed.proj.weight", r.rng.standard_normal((32, 3, 14, 14)).astype(BF16)),
          ("vision_tower.encoder.blocks.0.wqkv.weight", r.lin(96, 32)),
          ("vision_tower.encoder.blocks.0.norm0.weight", r.norm(32)),
          ("vision_tower.encoder.final_layernorm.weight", r.norm(32)),
          ("mm_projector.pre_norm.weight", r.norm(128)),
          ("mm_projector.proj.0.weight", r.lin(64, 128)),
          ("mm_projector.proj.2.weight", r.lin(64, 64))]


def write_target_checkpoint(out_dir: str, cfg: ModelConfig, *, layout: str = "k26", n_shards: int = 3,
                            seed: int = 0, vision: Optional[bool] = None, float_dtype=BF16) -> str:
  """Writes a random target checkpoint of `cfg` in the real layout. Returns out_dir.

  Memory: one shard at a time is held (groups are generated lazily and written per shard)."""
  import json
  vision = (layout == "k26") if vision is None else vision
  config = hf_target_config(cfg, layout)
  os.makedirs(out_dir, exist_ok=True)
  with open(os.path.join(out_dir, "config.json"), "w") as f:
    json.dump(config, f, indent=2)
  gen = target_groups(cfg, layout, seed, float_dtype)
  n_groups = cfg.num_hidden_layers + 2 + (1 if vision else 0)
  n_shards = max(1, min(n_shards, n_groups))
  per = math.ceil(n_groups / n_shards)
  weight_map, total, k = {}, 0, 0
  # Stream: fill one shard (`per` groups), write it, drop it. The vision tower goes first, as in K2.6.
  pending = [vision_tensors(seed)] if vision else []

  def flush(groups, k):
    nonlocal total
    fname = "model.safetensors" if n_shards == 1 else f"model-{k + 1:05d}-of-{n_shards:05d}.safetensors"
    tensors = dict(t for g in groups for t in g)
    write_safetensors(os.path.join(out_dir, fname), tensors, {"format": "pt"})
    total += sum(a.nbytes for a in tensors.values())
    weight_map.update({name: fname for name in tensors})

  for g in gen:
    pending.append(g)
    if len(pending) == per and k < n_shards - 1:
      flush(pending, k)
      pending, k = [], k + 1
  flush(pending, k)
  if k + 1 != n_shards:   # fewer shards than announced in the names: rename to the real count
    for i in range(k + 1):
      old = os.path.join(out_dir, f"model-{i + 1:05d}-of-{n_shards:05d}.safetensors")
      new_name = f"model-{i + 1:05d}-of-{k + 1:05d}.safetensors"
      os.rename(old, os.path.join(out_dir, new_name))
      weight_map = {n: (new_name if f == os.path.basename(old) else f) for n, f in weight_map.items()}
  if n_shards > 1:
    write_index(out_dir, weight_map, total)
  return out_dir


# ---- drafter ------------------------------------------------------------------------------------

def tiny_drafter_config(target: ModelConfig, *, num_layers: int = 2, block_size: int = 4,
                        target_layer_ids: Optional[tuple[int, ...]] = None, **kw) -> DrafterConfig:
  ids = target_layer_ids if target_layer_ids is not None else tuple(
      sorted({min(target.num_hidden_layers - 1, i) for i in (0, target.num_hidden_layers - 1)}))
  base = dict(hidden_size=target.hidden_size, num_hidden_layers=num_layers, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, intermediate_size=2 * target.hidden_size,
              vocab_size=target.vocab_size, block_size=block_size, mask_token_id=target.vocab_size - 2,
              target_layer_ids=ids, num_target_layers=target.num_hidden_layers, rms_norm_eps=1e-6, rope_theta=1e6)
  base.update(kw)
  return DrafterConfig(**base)


def hf_drafter_config(c: DrafterConfig) -> dict[str, Any]:
  d = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3",
       "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
       "hidden_size": c.hidden_size, "num_hidden_layers": c.num_hidden_layers,
       "num_attention_heads": c.num_attention_heads, "num_key_value_heads": c.num_key_value_heads,
       "head_dim": c.head_dim, "intermediate_size": c.intermediate_size, "vocab_size": c.vocab_size,
       "rms_norm_eps": c.rms_norm_eps, "rope_theta": c.rope_theta, "rope_scaling": _rope_dict(c),
       "max_position_embeddings": c.max_position_embeddings, "attention_bias": False, "hidden_act": "silu",
       "tie_word_embeddings": False, "torch_dtype": "bfloat16", "block_size": c.block_size,
       "num_target_layers": c.num_target_layers or None,
       "dflash_config": {"mask_token_id": c.mask_token_id,
                         "target_layer_ids": list(c.target_layer_ids)}}
  return d


def drafter_tensors(c: DrafterConfig, seed: int = 0, float_dtype=BF16) -> dict[str, np.ndarray]:
  r = _Rand(seed, float_dtype)
  d, hd = c.hidden_size, c.head_dim
  q, kv = c.num_attention_heads * hd, c.num_key_value_heads * hd
  t = {}
  for i in range(c.num_hidden_layers):
    a = f"layers.{i}.self_attn."
    t.update({a + "q_proj.weight": r.lin(q, d), a + "k_proj.weight": r.lin(kv, d), a + "v_proj.weight": r.lin(kv, d),
              a + "o_proj.weight": r.lin(d, q, 0.7), a + "q_norm.weight": r.norm(hd), a + "k_norm.weight": r.norm(hd),
              f"layers.{i}.input_layernorm.weight": r.norm(d), f"layers.{i}.post_attention_layernorm.weight": r.norm(d),
              f"layers.{i}.mlp.gate_proj.weight": r.lin(c.intermediate_size, d),
              f"layers.{i}.mlp.up_proj.weight": r.lin(c.intermediate_size, d),
              f"layers.{i}.mlp.down_proj.weight": r.lin(d, c.intermediate_size, 0.5)})
  t["fc.weight"] = r.lin(d, len(c.target_layer_ids) * d)
  t["hidden_norm.weight"] = r.norm(d)
  t["norm.weight"] = r.norm(d)
  return t


def write_drafter_checkpoint(out_dir: str, c: DrafterConfig, *, seed: int = 0, float_dtype=BF16) -> str:
  import json
  os.makedirs(out_dir, exist_ok=True)
  with open(os.path.join(out_dir, "config.json"), "w") as f:
    json.dump(hf_drafter_config(c), f, indent=2)
  write_safetensors(os.path.join(out_dir, "model.safetensors"), drafter_tensors(c, seed, float_dtype), {"format": "pt"})
  return out_dir
