"""Hugging Face tensor names of DeepSeek-V3 / Kimi K2.x <-> parameter paths of our `DeepseekV3`.

Parameter paths are the NNX state paths joined by dots, e.g. `layers.1.self_attn.q_a_proj.kernel`.
Conventions (HF Linear weights are [out, in]):
- nnx.Linear kernels are [in, out]: the HF weight transposed (`lm_head.kernel` [D, V] too);
- `embed_tokens.embedding` [V, D] is the HF embedding as is;
- the router `mlp.gate.kernel` [D, E] is HF `mlp.gate.weight` [E, D] transposed; its
  `e_score_correction_bias` [E] stays fp32;
- INT4 experts are stacked over experts in the HF orientation: `experts.{gate,up,down}_packed`
  int32 [E, out, in/8] and `experts.{gate,up,down}_scale` [E, out, in/group]; `weight_shape` is
  checked against [out, in] and not stored;
- bf16 (dense) experts become `experts.w_gate` / `experts.w_up` [E, D, I] and `experts.w_down` [E, I, D]
  (each HF weight transposed, then stacked).
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Optional

from ddtree_jax.config import ModelConfig

FLOAT = ("BF16", "F16", "F32")
INT32 = ("I32",)
SHAPE = ("I32", "I64")

# Top-level prefixes of multimodal checkpoints that the text engine does not use.
VISION_PREFIXES = ("vision_tower.", "mm_projector.", "multi_modal_projector.", "vision_model.")


@dataclasses.dataclass(frozen=True)
class Source:
  name: str                       # HF tensor name
  shape: tuple[int, ...]          # expected HF shape
  dtypes: tuple[str, ...]         # accepted safetensors dtypes
  value: Optional[tuple[int, ...]] = None  # for `weight_shape`: the expected contents


@dataclasses.dataclass(frozen=True)
class ParamSpec:
  path: str                       # our parameter path
  group: str                      # conversion unit: "embed_tokens", "norm", "lm_head" or "layers.{i}"
  sources: tuple[Source, ...]     # one tensor, or one per expert (stacked on a new axis 0)
  transpose: bool = False         # HF [out, in] -> [in, out] (per source, before stacking)
  checks: tuple[Source, ...] = () # read and compared with `value`, not stored
  stacked: bool = False

  @property
  def shape(self) -> tuple[int, ...]:
    s = self.sources[0].shape
    s = s[::-1] if self.transpose else s
    return (len(self.sources),) + s if self.stacked else s


def _lin(path, group, name, out_dim, in_dim):
  return ParamSpec(path, group, (Source(name, (out_dim, in_dim), FLOAT),), transpose=True)


def _vec(path, group, name, n, dtypes=FLOAT):
  return ParamSpec(path, group, (Source(name, (n,), dtypes),))


def _swiglu(specs, path, group, name, d, i):
  specs.append(_lin(f"{path}.gate_proj.kernel", group, f"{name}.gate_proj.weight", i, d))
  specs.append(_lin(f"{path}.up_proj.kernel", group, f"{name}.up_proj.weight", i, d))
  specs.append(_lin(f"{path}.down_proj.kernel", group, f"{name}.down_proj.weight", d, i))


def layer_specs(cfg: ModelConfig, i: int) -> list[ParamSpec]:
  p, g, pp = f"{cfg.tensor_prefix}layers.{i}.", f"layers.{i}", f"layers.{i}."
  d, h = cfg.hidden_size, cfg.num_attention_heads
  s: list[ParamSpec] = [
      _vec(pp + "input_layernorm.weight", g, p + "input_layernorm.weight", d),
      _vec(pp + "post_attention_layernorm.weight", g, p + "post_attention_layernorm.weight", d),
  ]
  a, aa = p + "self_attn.", pp + "self_attn."
  if cfg.q_lora_rank:
    s.append(_lin(aa + "q_a_proj.kernel", g, a + "q_a_proj.weight", cfg.q_lora_rank, d))
    s.append(_vec(aa + "q_a_layernorm.weight", g, a + "q_a_layernorm.weight", cfg.q_lora_rank))
    s.append(_lin(aa + "q_b_proj.kernel", g, a + "q_b_proj.weight", h * cfg.qk_head_dim, cfg.q_lora_rank))
  else:
    s.append(_lin(aa + "q_proj.kernel", g, a + "q_proj.weight", h * cfg.qk_head_dim, d))
  s.append(_lin(aa + "kv_a_proj_with_mqa.kernel", g, a + "kv_a_proj_with_mqa.weight", cfg.latent_dim, d))
  s.append(_vec(aa + "kv_a_layernorm.weight", g, a + "kv_a_layernorm.weight", cfg.kv_lora_rank))
  s.append(_lin(aa + "kv_b_proj.kernel", g, a + "kv_b_proj.weight",
                h * (cfg.qk_nope_head_dim + cfg.v_head_dim), cfg.kv_lora_rank))
  s.append(_lin(aa + "o_proj.kernel", g, a + "o_proj.weight", d, h * cfg.v_head_dim))
  m, mm = p + "mlp.", pp + "mlp."
  if not cfg.is_moe_layer(i):
    _swiglu(s, mm[:-1], g, m[:-1], d, cfg.intermediate_size)
    return s
  e_n, inter = cfg.n_routed_experts, cfg.moe_intermediate_size
  s.append(_lin(mm + "gate.kernel", g, m + "gate.weight", e_n, d))
  s.append(_vec(mm + "gate.e_score_correction_bias", g, m + "gate.e_score_correction_bias", e_n))
  dims = {"gate": (inter, d), "up": (inter, d), "down": (d, inter)}
  for w, (o, k) in dims.items():
    names = [f"{m}experts.{e}.{w}_proj" for e in range(e_n)]
    if cfg.experts_int4:
      gs = cfg.quantization.group_size
      s.append(ParamSpec(f"{mm}experts.{w}_packed", g, tuple(Source(n + ".weight_packed", (o, k // 8), INT32)
                                                              for n in names), stacked=True,
                         checks=tuple(Source(n + ".weight_shape", (2,), SHAPE, (o, k)) for n in names)))
      s.append(ParamSpec(f"{mm}experts.{w}_scale", g, tuple(Source(n + ".weight_scale", (o, k // gs), FLOAT)
                                                             for n in names), stacked=True))
    else:
      s.append(ParamSpec(f"{mm}experts.w_{w}", g, tuple(Source(n + ".weight", (o, k), FLOAT) for n in names),
                         transpose=True, stacked=True))
  if cfg.n_shared_experts:
    _swiglu(s, mm + "shared_experts", g, m + "shared_experts", d, inter * cfg.n_shared_experts)
  return s


def target_param_specs(cfg: ModelConfig) -> list[ParamSpec]:
  """Every parameter of DeepseekV3(cfg), in checkpoint order, with its HF source tensors."""
  p, d, v = cfg.tensor_prefix, cfg.hidden_size, cfg.vocab_size
  specs = [ParamSpec("embed_tokens.embedding", "embed_tokens", (Source(p + "embed_tokens.weight", (v, d), FLOAT),))]
  for i in range(cfg.num_hidden_layers):
    specs.extend(layer_specs(cfg, i))
  specs.append(_vec("norm.weight", "norm", p + "norm.weight", d))
  specs.append(_lin("lm_head.kernel", "lm_head", cfg.lm_head_name, v, d))
  return specs


def groups(specs: list[ParamSpec]) -> dict[str, list[ParamSpec]]:
  out: dict[str, list[ParamSpec]] = {}
  for s in specs:
    out.setdefault(s.group, []).append(s)
  return out


def hf_to_param(specs: list[ParamSpec]) -> dict[str, tuple[str, Optional[int]]]:
  """HF name -> (param path, expert index or None). `weight_shape` tensors map too (index set)."""
  out: dict[str, tuple[str, Optional[int]]] = {}
  for s in specs:
    for e, src in enumerate(s.sources):
      out[src.name] = (s.path, e if s.stacked else None)
    for e, src in enumerate(s.checks):
      out[src.name] = (s.path, e)
  return out


def param_to_hf(specs: list[ParamSpec]) -> dict[str, tuple[str, ...]]:
  """param path -> its HF source names (one per expert for stacked experts)."""
  return {s.path: tuple(src.name for src in s.sources) for s in specs}


_LAYER_RE = re.compile(r"layers\.(\d+)\.")


def skip_reason(name: str, cfg: ModelConfig, raw_config: Optional[dict[str, Any]] = None) -> Optional[str]:
  """Why a tensor that no parameter uses may be ignored ("vision", "mtp", "rotary"), or None."""
  if name.startswith(VISION_PREFIXES):
    return "vision"
  if name.endswith("rotary_emb.inv_freq"):
    return "rotary"
  if name.startswith(cfg.tensor_prefix):
    m = _LAYER_RE.match(name[len(cfg.tensor_prefix):])
    if m:
      text = (raw_config or {}).get("text_config", raw_config or {})
      nextn = int(text.get("num_nextn_predict_layers") or 0)
      if cfg.num_hidden_layers <= int(m.group(1)) < cfg.num_hidden_layers + nextn:
        return "mtp"
  return None
