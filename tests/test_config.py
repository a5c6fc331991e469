import json

import pytest

from configs.kimi_k2_6 import kimi_k2_6
from ddtree_jax.config import ConfigError, config_from_hf_dict, load_config
from ddtree_jax.model.rope import yarn_inv_freq
from ddtree_jax.model.size import size_report


def k26_hf_dict():
  text = {
      "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "vocab_size": 163840,
      "hidden_size": 7168, "num_hidden_layers": 61, "num_attention_heads": 64, "num_key_value_heads": 64,
      "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
      "v_head_dim": 128, "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 384,
      "num_experts_per_tok": 8, "n_shared_experts": 1, "first_k_dense_replace": 1, "moe_layer_freq": 1,
      "n_group": 1, "topk_group": 1, "norm_topk_prob": True, "routed_scaling_factor": 2.827,
      "scoring_func": "sigmoid", "topk_method": "noaux_tc", "rope_theta": 50000.0,
      "rope_scaling": {"type": "yarn", "factor": 64.0, "original_max_position_embeddings": 4096,
                       "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0},
      "rms_norm_eps": 1e-5, "max_position_embeddings": 262144, "tie_word_embeddings": False,
      "bos_token_id": 163584, "eos_token_id": 163585, "torch_dtype": "bfloat16",
  }
  quant = {"quant_method": "compressed-tensors", "format": "pack-quantized",
           "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": None,
                                         "weights": {"num_bits": 4, "type": "int", "symmetric": True,
                                                     "strategy": "group", "group_size": 32}}},
           "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
                      "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"]}
  return {"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
          "text_config": text, "vision_config": {"hidden_size": 1152, "num_hidden_layers": 27},
          "quantization_config": quant}


def test_kimi_preset_matches_reference_numbers():
  c = kimi_k2_6()
  assert (c.hidden_size, c.num_hidden_layers, c.num_attention_heads) == (7168, 61, 64)
  assert (c.q_lora_rank, c.kv_lora_rank) == (1536, 512)
  assert (c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim) == (128, 64, 128)
  assert (c.intermediate_size, c.moe_intermediate_size) == (18432, 2048)
  assert (c.n_routed_experts, c.num_experts_per_tok, c.n_shared_experts) == (384, 8, 1)
  assert (c.first_k_dense_replace, c.moe_layer_freq, c.n_group, c.topk_group) == (1, 1, 1, 1)
  assert c.norm_topk_prob and c.routed_scaling_factor == 2.827
  assert c.rope_theta == 50000 and c.rope_scaling.factor == 64 and c.rope_scaling.original_max_position_embeddings == 4096
  assert (c.vocab_size, c.rms_norm_eps, c.max_position_embeddings) == (163840, 1e-5, 262144)
  assert (c.bos_token_id, c.eos_token_id) == (163584, 163585) and 163586 in c.stop_token_ids
  assert c.quantization.group_size == 32 and not c.tie_word_embeddings
  assert abs(c.softmax_scale - 0.144680) < 1e-6
  assert c.latent_dim * 2 * c.num_hidden_layers == 70272
  assert [c.is_moe_layer(i) for i in range(3)] == [False, True, True]


def test_kimi_size_matches_published():
  r = size_report(kimi_k2_6())
  assert 1.00e12 < r.total_params < 1.05e12            # "about 1.0 T"
  assert 31e9 < r.active_params_per_token < 34e9      # "about 32 B active"
  assert 540 * 2**30 < r.bytes_on_disk < 570 * 2**30  # "about 555 GB" (binary GB)


def test_nested_text_config_parses_to_preset():
  c = config_from_hf_dict(k26_hf_dict())
  ref = kimi_k2_6()
  for f in ("hidden_size", "num_hidden_layers", "q_lora_rank", "kv_lora_rank", "n_routed_experts",
            "routed_scaling_factor", "rope_scaling", "rope_theta", "tensor_prefix", "lm_head_name"):
    assert getattr(c, f) == getattr(ref, f), f
  assert c.quantization.group_size == 32
  assert c.tensor_prefix == "language_model.model."


def test_flat_and_rope_parameters_forms():
  text = k26_hf_dict()["text_config"]
  flat = config_from_hf_dict(dict(text))
  assert flat.tensor_prefix == "model." and flat.quantization is None
  newer = dict(text)
  rs = newer.pop("rope_scaling")
  newer.pop("rope_theta")
  newer["rope_parameters"] = {"rope_type": "yarn", "rope_theta": 50000.0,
                              **{k: v for k, v in rs.items() if k != "type"}}
  c = config_from_hf_dict(newer)
  assert c.rope_scaling == flat.rope_scaling and c.rope_theta == flat.rope_theta


def test_yarn_correction_range_reference_numbers():
  # REFERENCE: theta 5e4, L 4096, beta 32/1 -> low/high = 8/20 over 64 rope dims.
  import math
  dim, theta, L = 64, 5e4, 4096
  cd = lambda r: dim * math.log(L / (2 * math.pi * r)) / (2 * math.log(theta))
  assert (math.floor(cd(32)), math.ceil(cd(1))) == (8, 20)
  inv, mult = yarn_inv_freq(64, theta, kimi_k2_6().rope_scaling)
  base = 1.0 / theta ** (__import__("numpy").arange(0, 64, 2) / 64)
  assert mult == 1.0
  assert abs(inv[0] - base[0]) < 1e-12 and abs(inv[7] - base[7]) < 1e-12          # extrapolated
  assert abs(inv[25] - base[25] / 64) < 1e-15                                         # interpolated


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d["text_config"].pop("hidden_size"), "hidden_size"),
    (lambda d: d["text_config"].__setitem__("architectures", ["LlamaForCausalLM"]), "architectures"),
    (lambda d: d["text_config"].__setitem__("scoring_func", "softmax"), "scoring_func"),
    (lambda d: d["text_config"].__setitem__("n_group", 5), "n_group"),
    (lambda d: d["text_config"]["rope_scaling"].__setitem__("type", "dynamic"), "rope_scaling.type"),
    (lambda d: d["quantization_config"].__setitem__("quant_method", "gptq"), "quantization_config.quant_method"),
    (lambda d: d["quantization_config"]["config_groups"]["group_0"]["weights"].__setitem__("num_bits", 8),
     "num_bits"),
])
def test_bad_configs_name_the_field(mutate, field):
  d = k26_hf_dict()
  mutate(d)
  with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
    config_from_hf_dict(d)


def test_load_config_errors_name_the_file(tmp_path):
  with pytest.raises(ConfigError, match="no such file"):
    load_config(str(tmp_path / "missing"))
  p = tmp_path / "config.json"
  p.write_text("{not json")
  with pytest.raises(ConfigError, match=str(p)):
    load_config(str(p))
  p.write_text(json.dumps(k26_hf_dict()))
  assert load_config(str(tmp_path)).hidden_size == 7168
