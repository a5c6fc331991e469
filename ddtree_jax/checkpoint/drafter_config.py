"""The DFlash drafter's config: a Qwen3-style decoder plus the DFlash fields
(`block_size`, `dflash_config.mask_token_id`, `dflash_config.target_layer_ids`)."""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Optional

from ddtree_jax.config import ConfigError, ModelConfig, RopeScaling, _parse_rope


def default_target_layer_ids(num_target_layers: int, num_features: int) -> tuple[int, ...]:
  """Evenly spaced from layer 1 to N-3 (the DFlash reference default)."""
  if num_features == 1:
    return (num_target_layers // 2,)
  start, end = 1, num_target_layers - 3
  return tuple(int(round(start + i * (end - start) / (num_features - 1))) for i in range(num_features))


@dataclasses.dataclass(frozen=True)
class DrafterConfig:
  hidden_size: int
  num_hidden_layers: int
  num_attention_heads: int
  num_key_value_heads: int
  head_dim: int
  intermediate_size: int
  vocab_size: int
  block_size: int
  mask_token_id: int
  target_layer_ids: Optional[tuple[int, ...]]   # None: default_target_layer_ids(target layers, num layers)
  rms_norm_eps: float = 1e-6
  rope_theta: float = 1e6
  rope_scaling: RopeScaling = RopeScaling()
  max_position_embeddings: int = 40960
  attention_bias: bool = False

  @property
  def num_features(self) -> int:
    """K: how many target layers feed the context (fc: [K*D, D])."""
    return len(self.target_layer_ids) if self.target_layer_ids is not None else self.num_hidden_layers

  def replace(self, **kw) -> "DrafterConfig":
    return dataclasses.replace(self, **kw)

  def resolved(self, target: ModelConfig) -> "DrafterConfig":
    if self.target_layer_ids is not None:
      return self
    return self.replace(target_layer_ids=default_target_layer_ids(target.num_hidden_layers, self.num_hidden_layers))

  def check_against_target(self, target: ModelConfig, where: str = "drafter config.json") -> "DrafterConfig":
    """Raises ConfigError when the drafter cannot run on `target`; returns the resolved config."""
    if self.hidden_size != target.hidden_size:
      raise ConfigError(f"{where}: drafter hidden_size {self.hidden_size} does not match the target's "
                        f"hidden_size {target.hidden_size} (the drafter reads target features and embeddings)")
    if self.vocab_size != target.vocab_size:
      raise ConfigError(f"{where}: drafter vocab_size {self.vocab_size} does not match the target's "
                        f"vocab_size {target.vocab_size} (the drafter uses the target's embed_tokens and lm_head)")
    r = self.resolved(target)
    bad = [i for i in r.target_layer_ids if not 0 <= i < target.num_hidden_layers]
    if bad:
      raise ConfigError(f"{where}: dflash_config.target_layer_ids {list(r.target_layer_ids)} has {bad} out of range "
                        f"for a target with {target.num_hidden_layers} layers (valid 0..{target.num_hidden_layers - 1})")
    if not 0 <= self.mask_token_id < target.vocab_size:
      raise ConfigError(f"{where}: dflash_config.mask_token_id {self.mask_token_id} is outside the target "
                        f"vocabulary [0, {target.vocab_size})")
    return r


def drafter_config_from_hf_dict(d: dict[str, Any], where: str = "config.json") -> DrafterConfig:
  req = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")
  for f in req:
    if d.get(f) is None:
      raise ConfigError(f"{where}: required drafter config field '{f}' is missing")
  dfl = d.get("dflash_config") or {}
  block = d.get("block_size", dfl.get("block_size"))
  if block is None:
    raise ConfigError(f"{where}: required drafter config field 'block_size' is missing")
  mask = dfl.get("mask_token_id", d.get("mask_token_id"))
  if mask is None:
    raise ConfigError(f"{where}: required drafter config field 'dflash_config.mask_token_id' is missing")
  ids = dfl.get("target_layer_ids", d.get("target_layer_ids"))
  heads = int(d["num_attention_heads"])
  theta, rs = _parse_rope(d, where)
  cfg = DrafterConfig(
      hidden_size=int(d["hidden_size"]), num_hidden_layers=int(d["num_hidden_layers"]),
      num_attention_heads=heads, num_key_value_heads=int(d.get("num_key_value_heads") or heads),
      head_dim=int(d.get("head_dim") or int(d["hidden_size"]) // heads),
      intermediate_size=int(d["intermediate_size"]), vocab_size=int(d["vocab_size"]),
      block_size=int(block), mask_token_id=int(mask),
      target_layer_ids=tuple(int(i) for i in ids) if ids is not None else None,
      rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)), rope_theta=theta, rope_scaling=rs,
      max_position_embeddings=int(d.get("max_position_embeddings", 40960)),
      attention_bias=bool(d.get("attention_bias", False)))
  if cfg.attention_bias:
    raise ConfigError(f"{where}: config field 'attention_bias' = true; DFlash drafters have no attention bias")
  if cfg.block_size < 2:
    raise ConfigError(f"{where}: config field 'block_size' must be >= 2, got {cfg.block_size}")
  if cfg.num_attention_heads % cfg.num_key_value_heads:
    raise ConfigError(f"{where}: num_attention_heads {heads} is not a multiple of num_key_value_heads "
                      f"{cfg.num_key_value_heads}")
  return cfg


def load_drafter_config(path: str) -> DrafterConfig:
  if os.path.isdir(path):
    path = os.path.join(path, "config.json")
  if not os.path.exists(path):
    raise ConfigError(f"{path}: no such file (expected the drafter's config.json)")
  try:
    with open(path) as f:
      d = json.load(f)
  except json.JSONDecodeError as e:
    raise ConfigError(f"{path}: not valid JSON ({e})") from None
  return drafter_config_from_hf_dict(d, where=path)
