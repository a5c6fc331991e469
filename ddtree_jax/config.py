"""Typed model configs, built from a Hugging Face `config.json`.

Accepts the flat DeepSeek-V3 / Kimi K2-Instruct layout and the Kimi K2.5/K2.6 multimodal layout with
the text model nested under `text_config`. RoPE scaling is read both as older transformers write it
(`rope_scaling` + `rope_theta`) and as newer ones do (`rope_parameters`).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any, Optional

SUPPORTED_TEXT_ARCHITECTURES = ("DeepseekV3ForCausalLM",)
SUPPORTED_WRAPPER_ARCHITECTURES = ("KimiK25ForConditionalGeneration",)
SUPPORTED_MODEL_TYPES = ("deepseek_v3", "kimi_k2")


class ConfigError(ValueError):
  """A config.json that the engine cannot run, with the field and what was expected."""


@dataclasses.dataclass(frozen=True)
class RopeScaling:
  """YaRN rotary scaling (type 'yarn'); factor 1.0 means plain RoPE."""
  type: str = "none"
  factor: float = 1.0
  original_max_position_embeddings: int = 4096
  beta_fast: float = 32.0
  beta_slow: float = 1.0
  mscale: float = 1.0
  mscale_all_dim: float = 0.0


@dataclasses.dataclass(frozen=True)
class Int4Quantization:
  """compressed-tensors pack-quantized INT4 for the routed experts (symmetric, group-wise)."""
  num_bits: int = 4
  group_size: int = 32
  ignore: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """The DeepSeek-V3 text model (Kimi K2.x). Names follow the HF config fields."""
  vocab_size: int
  hidden_size: int
  num_hidden_layers: int
  num_attention_heads: int
  q_lora_rank: Optional[int]
  kv_lora_rank: int
  qk_nope_head_dim: int
  qk_rope_head_dim: int
  v_head_dim: int
  intermediate_size: int
  moe_intermediate_size: int
  n_routed_experts: int
  num_experts_per_tok: int
  n_shared_experts: int
  first_k_dense_replace: int
  moe_layer_freq: int = 1
  n_group: int = 1
  topk_group: int = 1
  norm_topk_prob: bool = True
  routed_scaling_factor: float = 1.0
  scoring_func: str = "sigmoid"
  topk_method: str = "noaux_tc"
  rope_theta: float = 10000.0
  rope_scaling: RopeScaling = RopeScaling()
  rms_norm_eps: float = 1e-6
  latent_norm_eps: float = 1e-6          # q_a_layernorm / kv_a_layernorm (official code and HF: 1e-6)
  max_position_embeddings: int = 4096
  tie_word_embeddings: bool = False
  bos_token_id: Optional[int] = None
  eos_token_id: Optional[int] = None
  stop_token_ids: tuple[int, ...] = ()
  quantization: Optional[Int4Quantization] = None
  tensor_prefix: str = "model."        # "language_model.model." for K2.5/K2.6
  lm_head_name: str = "lm_head.weight"  # "language_model.lm_head.weight" for K2.5/K2.6

  # ---- derived -------------------------------------------------------------------------------
  @property
  def qk_head_dim(self) -> int:
    return self.qk_nope_head_dim + self.qk_rope_head_dim

  @property
  def latent_dim(self) -> int:
    """Cached values per token per layer: c_kv + k_pe."""
    return self.kv_lora_rank + self.qk_rope_head_dim

  def is_moe_layer(self, i: int) -> bool:
    return (self.n_routed_experts > 0 and i >= self.first_k_dense_replace and i % self.moe_layer_freq == 0)

  @property
  def softmax_scale(self) -> float:
    scale = self.qk_head_dim ** -0.5
    rs = self.rope_scaling
    if rs.type == "yarn" and rs.factor > 1.0 and rs.mscale_all_dim:
      m = yarn_mscale(rs.factor, rs.mscale_all_dim)
      scale *= m * m
    return scale

  @property
  def experts_int4(self) -> bool:
    return self.quantization is not None

  def replace(self, **kw) -> "ModelConfig":
    return dataclasses.replace(self, **kw)

  def validate(self) -> "ModelConfig":
    def need(cond, field, msg):
      if not cond:
        raise ConfigError(f"config field '{field}': {msg}")
    for f in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "kv_lora_rank",
              "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
      need(getattr(self, f) > 0, f, f"must be a positive integer, got {getattr(self, f)}")
    need(self.qk_rope_head_dim % 2 == 0, "qk_rope_head_dim", f"must be even for RoPE, got {self.qk_rope_head_dim}")
    need(self.scoring_func == "sigmoid", "scoring_func", f"only 'sigmoid' is supported, got {self.scoring_func!r}")
    need(self.topk_method == "noaux_tc", "topk_method", f"only 'noaux_tc' is supported, got {self.topk_method!r}")
    if self.n_routed_experts:
      need(self.n_routed_experts % self.n_group == 0, "n_group",
           f"n_routed_experts={self.n_routed_experts} is not divisible by n_group={self.n_group}")
      need(1 <= self.topk_group <= self.n_group, "topk_group", f"must be in [1, n_group={self.n_group}], got {self.topk_group}")
      need(1 <= self.num_experts_per_tok <= self.n_routed_experts, "num_experts_per_tok",
           f"must be in [1, n_routed_experts], got {self.num_experts_per_tok}")
      per_group = self.n_routed_experts // self.n_group
      need(self.n_group == 1 or per_group >= 2, "n_group", "group-limited routing needs >= 2 experts per group")
      need(self.num_experts_per_tok <= per_group * self.topk_group, "num_experts_per_tok",
           f"{self.num_experts_per_tok} exceeds the experts in the kept groups ({per_group * self.topk_group})")
    need(self.moe_layer_freq >= 1, "moe_layer_freq", f"must be >= 1, got {self.moe_layer_freq}")
    need(self.rope_scaling.type in ("none", "yarn"), "rope_scaling.type",
         f"only 'yarn' (or no scaling) is supported, got {self.rope_scaling.type!r}")
    if self.quantization is not None:
      q = self.quantization
      need(q.num_bits == 4, "quantization_config.config_groups.*.weights.num_bits", f"only 4 is supported, got {q.num_bits}")
      need(self.moe_intermediate_size % q.group_size == 0 and self.hidden_size % q.group_size == 0,
           "quantization_config.config_groups.*.weights.group_size",
           f"group_size {q.group_size} must divide hidden_size and moe_intermediate_size")
    return self


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
  if scale <= 1.0:
    return 1.0
  return 0.1 * mscale * math.log(scale) + 1.0


# ---- parsing ---------------------------------------------------------------------------------

def _parse_rope(d: dict[str, Any], where: str) -> tuple[float, RopeScaling]:
  """Returns (rope_theta, RopeScaling) from either `rope_scaling`+`rope_theta` or `rope_parameters`."""
  params = d.get("rope_parameters")
  scaling = d.get("rope_scaling")
  theta = d.get("rope_theta")
  if isinstance(params, dict):
    theta = params.get("rope_theta", theta)
    if scaling is None:
      scaling = params
  if theta is None:
    theta = 10000.0
  if not scaling:
    return float(theta), RopeScaling()
  kind = scaling.get("rope_type", scaling.get("type", "default"))
  if kind in ("default", "none", None):
    return float(theta), RopeScaling()
  if kind != "yarn":
    raise ConfigError(f"{where}: config field 'rope_scaling.type' = {kind!r}; only 'yarn' is supported")
  try:
    rs = RopeScaling(
        type="yarn",
        factor=float(scaling["factor"]),
        original_max_position_embeddings=int(scaling["original_max_position_embeddings"]),
        beta_fast=float(scaling.get("beta_fast", 32.0)),
        beta_slow=float(scaling.get("beta_slow", 1.0)),
        mscale=float(scaling.get("mscale", 1.0)),
        mscale_all_dim=float(scaling.get("mscale_all_dim", 0.0)),
    )
  except KeyError as e:
    raise ConfigError(f"{where}: config field 'rope_scaling.{e.args[0]}' is required for YaRN") from None
  return float(theta), rs


def _parse_quant(q: Optional[dict[str, Any]], where: str) -> Optional[Int4Quantization]:
  if not q:
    return None
  method = q.get("quant_method")
  if method != "compressed-tensors":
    raise ConfigError(f"{where}: config field 'quantization_config.quant_method' = {method!r}; "
                      "only 'compressed-tensors' (pack-quantized INT4) is supported")
  fmt = q.get("format")
  if fmt != "pack-quantized":
    raise ConfigError(f"{where}: config field 'quantization_config.format' = {fmt!r}; expected 'pack-quantized'")
  groups = q.get("config_groups") or {}
  if len(groups) != 1:
    raise ConfigError(f"{where}: config field 'quantization_config.config_groups' must hold exactly one group, "
                      f"got {len(groups)}")
  (gname, g), = groups.items()
  w = g.get("weights") or {}
  field = f"quantization_config.config_groups.{gname}.weights"
  if w.get("type", "int") != "int" or not w.get("symmetric", True) or w.get("strategy", "group") != "group":
    raise ConfigError(f"{where}: config field '{field}' must be symmetric int with strategy 'group', got {w}")
  if g.get("input_activations"):
    raise ConfigError(f"{where}: config field 'quantization_config.config_groups.{gname}.input_activations' "
                      "must be null (activation quantization is not supported)")
  return Int4Quantization(num_bits=int(w.get("num_bits", 4)), group_size=int(w.get("group_size", 32)),
                          ignore=tuple(q.get("ignore") or ()))


_REQUIRED = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "kv_lora_rank",
             "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "intermediate_size")


def config_from_hf_dict(d: dict[str, Any], where: str = "config.json") -> ModelConfig:
  """Builds a ModelConfig from a parsed HF config (flat or with `text_config`)."""
  prefix, head = "model.", "lm_head.weight"
  quant = d.get("quantization_config")
  archs = d.get("architectures") or []
  if "text_config" in d:
    if archs and not any(a in SUPPORTED_WRAPPER_ARCHITECTURES for a in archs):
      raise ConfigError(f"{where}: config field 'architectures' = {archs}; expected one of "
                        f"{SUPPORTED_WRAPPER_ARCHITECTURES} for a config with text_config")
    text = dict(d["text_config"])
    quant = quant or text.get("quantization_config")
    prefix, head = "language_model.model.", "language_model.lm_head.weight"
    d_text, where_text = text, f"{where} (text_config)"
  else:
    d_text, where_text = d, where
  t_archs = d_text.get("architectures") or []
  if t_archs and not any(a in SUPPORTED_TEXT_ARCHITECTURES for a in t_archs):
    raise ConfigError(f"{where_text}: config field 'architectures' = {t_archs}; expected {SUPPORTED_TEXT_ARCHITECTURES}")
  mt = d_text.get("model_type")
  if mt is not None and mt not in SUPPORTED_MODEL_TYPES:
    raise ConfigError(f"{where_text}: config field 'model_type' = {mt!r}; expected one of {SUPPORTED_MODEL_TYPES}")
  for f in _REQUIRED:
    if d_text.get(f) is None:
      raise ConfigError(f"{where_text}: required config field '{f}' is missing")
  theta, rs = _parse_rope(d_text, where_text)
  eos = d_text.get("eos_token_id", d.get("eos_token_id"))
  eos_list = eos if isinstance(eos, list) else ([eos] if eos is not None else [])
  n_routed = int(d_text.get("n_routed_experts") or 0)
  cfg = ModelConfig(
      vocab_size=int(d_text["vocab_size"]),
      hidden_size=int(d_text["hidden_size"]),
      num_hidden_layers=int(d_text["num_hidden_layers"]),
      num_attention_heads=int(d_text["num_attention_heads"]),
      q_lora_rank=(int(d_text["q_lora_rank"]) if d_text.get("q_lora_rank") else None),
      kv_lora_rank=int(d_text["kv_lora_rank"]),
      qk_nope_head_dim=int(d_text["qk_nope_head_dim"]),
      qk_rope_head_dim=int(d_text["qk_rope_head_dim"]),
      v_head_dim=int(d_text["v_head_dim"]),
      intermediate_size=int(d_text["intermediate_size"]),
      moe_intermediate_size=int(d_text.get("moe_intermediate_size") or 0),
      n_routed_experts=n_routed,
      num_experts_per_tok=int(d_text.get("num_experts_per_tok") or 0),
      n_shared_experts=int(d_text.get("n_shared_experts") or 0),
      first_k_dense_replace=int(d_text.get("first_k_dense_replace", 0)),
      moe_layer_freq=int(d_text.get("moe_layer_freq", 1)),
      n_group=int(d_text.get("n_group") or 1),
      topk_group=int(d_text.get("topk_group") or 1),
      norm_topk_prob=bool(d_text.get("norm_topk_prob", True)),
      routed_scaling_factor=float(d_text.get("routed_scaling_factor", 1.0)),
      scoring_func=str(d_text.get("scoring_func", "sigmoid")),
      topk_method=str(d_text.get("topk_method", "noaux_tc")),
      rope_theta=theta,
      rope_scaling=rs,
      rms_norm_eps=float(d_text.get("rms_norm_eps", 1e-6)),
      max_position_embeddings=int(d_text.get("max_position_embeddings", 4096)),
      tie_word_embeddings=bool(d_text.get("tie_word_embeddings", False)),
      bos_token_id=d_text.get("bos_token_id", d.get("bos_token_id")),
      eos_token_id=(eos_list[0] if eos_list else None),
      stop_token_ids=tuple(int(e) for e in eos_list),
      quantization=_parse_quant(quant, where),
      tensor_prefix=prefix,
      lm_head_name=head,
  )
  try:
    return cfg.validate()
  except ConfigError as e:
    raise ConfigError(f"{where_text}: {e}") from None


def read_config_json(path: str, what: str = "a Hugging Face config.json") -> tuple[dict[str, Any], str]:
  """Reads a config.json file (or a directory holding one) -> (parsed dict, file path); errors name the file."""
  if os.path.isdir(path):
    path = os.path.join(path, "config.json")
  if not os.path.exists(path):
    raise ConfigError(f"{path}: no such file (expected {what})")
  try:
    with open(path) as f:
      return json.load(f), path
  except json.JSONDecodeError as e:
    raise ConfigError(f"{path}: not valid JSON ({e})") from None


def load_config(path: str) -> ModelConfig:
  """Reads a target config.json file (or a directory holding one)."""
  d, path = read_config_json(path)
  return config_from_hf_dict(d, where=path)


@dataclasses.dataclass(frozen=True)
class DFlashConfig:
  """The DFlash block-diffusion drafter (a small Qwen3-style decoder with KV injection).

  Names follow the public DFlash config.json (a Qwen3 config plus `block_size`, `num_target_layers`
  and `dflash_config.{mask_token_id, target_layer_ids}`). The drafter has no embedding and no lm_head:
  it uses the target's.
  """
  vocab_size: int
  hidden_size: int
  num_hidden_layers: int
  num_attention_heads: int
  num_key_value_heads: int
  head_dim: int
  intermediate_size: int
  block_size: int
  mask_token_id: int
  target_layer_ids: tuple[int, ...]
  num_target_layers: int
  rms_norm_eps: float = 1e-6
  rope_theta: float = 1000000.0
  rope_scaling: RopeScaling = RopeScaling()
  max_position_embeddings: int = 40960

  def replace(self, **kw) -> "DFlashConfig":
    return dataclasses.replace(self, **kw)

  def check_against(self, target: ModelConfig, where: str = "drafter config.json") -> "DFlashConfig":
    """Raises ConfigError when this drafter cannot serve `target`."""
    if self.hidden_size != target.hidden_size:
      raise ConfigError(f"{where}: config field 'hidden_size' = {self.hidden_size} does not match the target's "
                        f"hidden_size {target.hidden_size}")
    if self.vocab_size != target.vocab_size:
      raise ConfigError(f"{where}: config field 'vocab_size' = {self.vocab_size} does not match the target's "
                        f"vocab_size {target.vocab_size}")
    bad = [i for i in self.target_layer_ids if not 0 <= i < target.num_hidden_layers]
    if bad:
      raise ConfigError(f"{where}: config field 'dflash_config.target_layer_ids' has {bad}, outside the target's "
                        f"layers [0, {target.num_hidden_layers})")
    if not 0 <= self.mask_token_id < target.vocab_size:
      raise ConfigError(f"{where}: config field 'dflash_config.mask_token_id' = {self.mask_token_id} is outside "
                        f"the vocabulary [0, {target.vocab_size})")
    if self.block_size < 2:
      raise ConfigError(f"{where}: config field 'block_size' = {self.block_size}; must be >= 2")
    return self


def default_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> tuple[int, ...]:
  """Evenly spaced from layer 1 to N-3 (the DFlash default when unspecified)."""
  if num_draft_layers == 1:
    return (num_target_layers // 2,)
  start, end = 1, max(num_target_layers - 3, 1)
  span = end - start
  return tuple(int(round(start + i * span / (num_draft_layers - 1))) for i in range(num_draft_layers))


def dflash_config_from_hf_dict(d: dict[str, Any], where: str = "drafter config.json") -> DFlashConfig:
  for f in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
            "block_size"):
    if d.get(f) is None:
      raise ConfigError(f"{where}: required config field '{f}' is missing")
  dc = d.get("dflash_config") or {}
  if "mask_token_id" not in dc:
    raise ConfigError(f"{where}: required config field 'dflash_config.mask_token_id' is missing")
  n_layers = int(d["num_hidden_layers"])
  n_target = int(d.get("num_target_layers") or 0)
  ids = dc.get("target_layer_ids")
  if ids is None:
    if not n_target:
      raise ConfigError(f"{where}: 'dflash_config.target_layer_ids' is missing and 'num_target_layers' is not set")
    ids = default_target_layer_ids(n_target, n_layers)
  theta, rs = _parse_rope(d, where)
  heads = int(d["num_attention_heads"])
  return DFlashConfig(
      vocab_size=int(d["vocab_size"]), hidden_size=int(d["hidden_size"]), num_hidden_layers=n_layers,
      num_attention_heads=heads, num_key_value_heads=int(d.get("num_key_value_heads") or heads),
      head_dim=int(d.get("head_dim") or int(d["hidden_size"]) // heads),
      intermediate_size=int(d["intermediate_size"]), block_size=int(d["block_size"]),
      mask_token_id=int(dc["mask_token_id"]), target_layer_ids=tuple(int(i) for i in ids),
      num_target_layers=n_target, rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)), rope_theta=theta,
      rope_scaling=rs, max_position_embeddings=int(d.get("max_position_embeddings", 40960)))
