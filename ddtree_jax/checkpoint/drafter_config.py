"""The DFlash drafter's config, as the checkpoint reader sees it.

The dataclass itself is `ddtree_jax.config.DFlashConfig` (the drafter model is built from it);
`DrafterConfig` is the same class. This module adds reading a drafter directory's config.json with
the checkpoint-level checks: fields a DFlash drafter must not have, a default for
`dflash_config.target_layer_ids` from the target when the file gives neither it nor `num_target_layers`,
and the fit against the target (hidden size, vocabulary, layer ids in range, mask token).
"""
from __future__ import annotations

from typing import Any, Optional

from ddtree_jax.config import (ConfigError, DFlashConfig, ModelConfig, default_target_layer_ids,
                               dflash_config_from_hf_dict, read_config_json)

DrafterConfig = DFlashConfig

__all__ = ["DrafterConfig", "default_target_layer_ids", "drafter_config_from_hf_dict", "load_drafter_config"]


def drafter_config_from_hf_dict(d: dict[str, Any], where: str = "config.json",
                                target: Optional[ModelConfig] = None) -> DrafterConfig:
  """Parses a drafter config.json dict; with `target`, also checks that the drafter fits it."""
  if d.get("attention_bias"):
    raise ConfigError(f"{where}: config field 'attention_bias' = true; DFlash drafters have no attention bias")
  d = dict(d)
  dc = d.get("dflash_config") or {}
  if target is not None and dc.get("target_layer_ids") is None and not d.get("num_target_layers"):
    d["num_target_layers"] = target.num_hidden_layers
  cfg = dflash_config_from_hf_dict(d, where)
  if target is not None:
    if cfg.num_target_layers and cfg.num_target_layers != target.num_hidden_layers:
      raise ConfigError(f"{where}: config field 'num_target_layers' = {cfg.num_target_layers} does not match the "
                        f"target's num_hidden_layers {target.num_hidden_layers}")
    cfg = cfg.check_against(target, where)
  return cfg


def load_drafter_config(path: str, target: Optional[ModelConfig] = None) -> DrafterConfig:
  d, path = read_config_json(path, "the drafter's config.json")
  return drafter_config_from_hf_dict(d, where=path, target=target)
