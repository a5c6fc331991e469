"""Export of the trained pair to the real HF layout.

Target: a flat DeepSeek-V3 `config.json` (`architectures=["DeepseekV3ForCausalLM"]`, tensors under
`model.` / `lm_head.weight`, as the text-only Kimi K2 checkpoints) with a compressed-tensors
`quantization_config`: routed experts INT4 group-32 (`weight_packed` int32 [out, in/8],
`weight_scale` bf16 [out, in/32], `weight_shape` int32 [2]), everything else bf16,
`e_score_correction_bias` fp32; `tokenizer.json`; `generation_config.json`.
Drafter: the public DFlash format (a Qwen3 config + `block_size`, `num_target_layers`,
`dflash_config.{mask_token_id, target_layer_ids}`), bf16 safetensors without embedding / lm_head.
Both directories load through `ddtree_jax.checkpoint.load_target` / `load_drafter`.
"""
from __future__ import annotations

import json
import os
import shutil
from typing import Optional

import ml_dtypes
import numpy as np

from custom_calls.moe_int4.layout import quantize_int4
from ddtree_jax.checkpoint.drafter_names import drafter_param_specs
from ddtree_jax.checkpoint.safetensors_reader import write_safetensors
from ddtree_jax.checkpoint.synthetic import hf_drafter_config, hf_target_config
from ddtree_jax.checkpoint.target_names import target_param_specs
from ddtree_jax.config import DFlashConfig, ModelConfig

BF16 = np.dtype(ml_dtypes.bfloat16)
_EXPERT_W = {"gate": "w_gate", "up": "w_up", "down": "w_down"}


def quantize_experts(cfg_int4: ModelConfig, params: dict) -> dict:
  """Flat params with dense experts (`experts.w_{gate,up,down}`, [E, in, out]) -> the INT4 model's flat
  params (`experts.{gate,up,down}_{packed,scale}`, HF [E, out, in] orientation). Host NumPy arrays."""
  g = cfg_int4.quantization.group_size
  out = {}
  for k, v in params.items():
    parts = k.split(".")
    if len(parts) >= 2 and parts[-2] == "experts" and parts[-1] in _EXPERT_W.values():
      base = ".".join(parts[:-1])
      name = {v_: k_ for k_, v_ in _EXPERT_W.items()}[parts[-1]]
      w = np.swapaxes(np.asarray(v, np.float32), 1, 2)                     # [E, out, in]
      packed, scale = quantize_int4(w, group_size=g)
      out[f"{base}.{name}_packed"] = np.asarray(packed, np.int32)
      out[f"{base}.{name}_scale"] = np.asarray(scale).astype(BF16)
    else:
      out[k] = np.asarray(v)
  return out


def to_storage_dtypes(params: dict) -> dict:
  """bf16 for floating weights, fp32 for the router bias, integers unchanged (host arrays)."""
  out = {}
  for k, v in params.items():
    a = np.asarray(v)
    if k.endswith("e_score_correction_bias"):
      out[k] = a.astype(np.float32)
    elif a.dtype.kind == "f" or a.dtype == BF16:
      out[k] = a.astype(BF16)
    else:
      out[k] = a
  return out


def target_tensors(cfg_int4: ModelConfig, params_int4: dict) -> dict[str, np.ndarray]:
  """{HF tensor name: array} from the INT4 model's flat params (the inverse of the reader's mapping)."""
  t = {}
  p = to_storage_dtypes(params_int4)
  for spec in target_param_specs(cfg_int4):
    a = p[spec.path]
    if spec.stacked:
      for e, src in enumerate(spec.sources):
        x = a[e]
        t[src.name] = np.ascontiguousarray(x.T if spec.transpose else x)
      for src in spec.checks:
        t[src.name] = np.asarray(src.value, np.int32)
    else:
      t[spec.sources[0].name] = np.ascontiguousarray(a.T if spec.transpose else a)
  return t


def export_target(cfg_int4: ModelConfig, params_int4: dict, out_dir: str, *, tokenizer_path: Optional[str] = None,
                  info: Optional[dict] = None) -> str:
  os.makedirs(out_dir, exist_ok=True)
  config = hf_target_config(cfg_int4, layout="k2")
  with open(os.path.join(out_dir, "config.json"), "w") as f:
    json.dump(config, f, indent=2)
  with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
    json.dump({"bos_token_id": cfg_int4.bos_token_id, "eos_token_id": cfg_int4.eos_token_id,
               "do_sample": False}, f, indent=2)
  write_safetensors(os.path.join(out_dir, "model.safetensors"), target_tensors(cfg_int4, params_int4),
                    {"format": "pt"})
  if tokenizer_path:
    shutil.copyfile(tokenizer_path, os.path.join(out_dir, "tokenizer.json"))
  if info is not None:
    with open(os.path.join(out_dir, "training_info.json"), "w") as f:
      json.dump(info, f, indent=2)
  return out_dir


def drafter_tensors(dcfg: DFlashConfig, params: dict) -> dict[str, np.ndarray]:
  p = to_storage_dtypes(params)
  t = {}
  for spec in drafter_param_specs(dcfg):
    a = p[spec.path]
    t[spec.sources[0].name] = np.ascontiguousarray(a.T if spec.transpose else a)
  return t


def export_drafter(dcfg: DFlashConfig, params: dict, out_dir: str, *, info: Optional[dict] = None) -> str:
  os.makedirs(out_dir, exist_ok=True)
  with open(os.path.join(out_dir, "config.json"), "w") as f:
    json.dump(hf_drafter_config(dcfg), f, indent=2)
  write_safetensors(os.path.join(out_dir, "model.safetensors"), drafter_tensors(dcfg, params), {"format": "pt"})
  if info is not None:
    with open(os.path.join(out_dir, "training_info.json"), "w") as f:
      json.dump(info, f, indent=2)
  return out_dir


def dir_size(path: str) -> int:
  return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
