"""DFlash drafter tensor names <-> parameter paths of `ddtree_jax.model.dflash`, and the reader.

HF names (`model.` prefix optional): `layers.{i}.self_attn.{q,k,v,o}_proj.weight`,
`layers.{i}.self_attn.{q,k}_norm.weight`, `layers.{i}.{input,post_attention}_layernorm.weight`,
`layers.{i}.mlp.{gate,up,down}_proj.weight`, `fc.weight` [D, K*D], `hidden_norm.weight`, `norm.weight`.
Param paths: the same with `.weight` -> `.kernel` for linear layers (transposed to [in, out]).
The drafter uses the target's embed_tokens and lm_head; copies of them in a drafter checkpoint are skipped.
"""
from __future__ import annotations

import logging
from typing import Iterator, Optional

import jax.numpy as jnp
import numpy as np

from ddtree_jax.checkpoint.drafter_config import DrafterConfig, drafter_config_from_hf_dict
from ddtree_jax.checkpoint.safetensors_reader import CheckpointError, SafetensorsDir
from ddtree_jax.checkpoint.target_names import FLOAT, ParamSpec, Source
from ddtree_jax.config import ConfigError, ModelConfig

log = logging.getLogger("ddtree_jax.checkpoint")

SHARED_WITH_TARGET = ("embed_tokens.weight", "lm_head.weight")


def drafter_param_specs(cfg: DrafterConfig, prefix: str = "") -> list[ParamSpec]:
  d, hd = cfg.hidden_size, cfg.head_dim
  q, kv = cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd

  def lin(path, name, o, i):
    return ParamSpec(path + ".kernel", "drafter", (Source(prefix + name + ".weight", (o, i), FLOAT),), transpose=True)

  def vec(path, n):
    return ParamSpec(path + ".weight", "drafter", (Source(prefix + path + ".weight", (n,), FLOAT),))

  specs = []
  for i in range(cfg.num_hidden_layers):
    a = f"layers.{i}.self_attn"
    specs += [lin(f"{a}.q_proj", f"{a}.q_proj", q, d), lin(f"{a}.k_proj", f"{a}.k_proj", kv, d),
              lin(f"{a}.v_proj", f"{a}.v_proj", kv, d), lin(f"{a}.o_proj", f"{a}.o_proj", d, q),
              vec(f"{a}.q_norm", hd), vec(f"{a}.k_norm", hd),
              vec(f"layers.{i}.input_layernorm", d), vec(f"layers.{i}.post_attention_layernorm", d)]
    m = f"layers.{i}.mlp"
    specs += [lin(f"{m}.gate_proj", f"{m}.gate_proj", cfg.intermediate_size, d),
              lin(f"{m}.up_proj", f"{m}.up_proj", cfg.intermediate_size, d),
              lin(f"{m}.down_proj", f"{m}.down_proj", d, cfg.intermediate_size)]
  specs += [lin("fc", "fc", d, len(cfg.target_layer_ids) * d), vec("hidden_norm", d), vec("norm", d)]
  return specs


class DrafterReader:
  """A DFlash drafter directory, checked (names, shapes, dtypes, and against the target config)."""

  def __init__(self, path: str, target_cfg: Optional[ModelConfig] = None):
    self.ckpt = SafetensorsDir(path)
    try:
      cfg = drafter_config_from_hf_dict(self.ckpt.config, where=self.ckpt.config_path, target=target_cfg)
    except ConfigError as e:
      raise CheckpointError(str(e)) from None
    self.cfg = cfg
    names = self.ckpt.tensors
    prefix = "model." if any(n.startswith("model.layers.") for n in names) else ""
    self.specs = drafter_param_specs(cfg, prefix)
    known = {s.sources[0].name for s in self.specs}
    skipped = []
    for name, info in names.items():
      if name in known:
        continue
      if name[len(prefix):] in SHARED_WITH_TARGET or name.endswith("rotary_emb.inv_freq"):
        skipped.append(name)
        continue
      raise CheckpointError(f"{info.file}: unknown tensor '{name}' {info.dtype}{list(info.shape)} "
                            f"does not belong to a {cfg.num_hidden_layers}-layer DFlash drafter")
    if skipped:
      log.info("%s: skipped %d tensors shared with the target: %s", self.ckpt.path, len(skipped), ", ".join(skipped))
    for spec in self.specs:
      src = spec.sources[0]
      info = names.get(src.name)
      if info is None:
        raise CheckpointError(f"{self.ckpt.path}: missing drafter tensor '{src.name}' (for parameter '{spec.path}')")
      if info.shape != src.shape:
        hint = ""
        if spec.path == "fc.kernel" and len(info.shape) == 2 and info.shape[1] % cfg.hidden_size == 0:
          hint = (f" ({info.shape[1] // cfg.hidden_size} target feature layers in the weights, "
                  f"{len(cfg.target_layer_ids)} in dflash_config.target_layer_ids)")
        raise CheckpointError(f"{info.file}: tensor '{src.name}' has shape {list(info.shape)}, "
                              f"expected {list(src.shape)} from config.json{hint}")
      if info.dtype not in src.dtypes:
        raise CheckpointError(f"{info.file}: tensor '{src.name}' has dtype {info.dtype}, "
                              f"expected one of {list(src.dtypes)}")

  def iter_params(self, dtype=jnp.bfloat16, on_tensor=None) -> Iterator[tuple[str, np.ndarray]]:
    """Yields (param path, host array [in, out] for kernels) one tensor at a time."""
    dtype = np.dtype(dtype)
    for spec in self.specs:
      a = self.ckpt.read(spec.sources[0].name)
      if on_tensor:
        on_tensor(a.nbytes)
      yield spec.path, np.ascontiguousarray(a.T if spec.transpose else a, dtype=dtype)

  def tensor_bytes(self) -> int:
    return sum(self.ckpt.tensors[s.sources[0].name].nbytes for s in self.specs)


def read_drafter(path: str, target_cfg: Optional[ModelConfig] = None, dtype=jnp.bfloat16
                 ) -> tuple[dict[str, np.ndarray], DrafterConfig]:
  """Host-side flat dict {param path: array} and the parsed config (use `load.load_drafter` for device arrays)."""
  r = DrafterReader(path, target_cfg)
  return dict(r.iter_params(dtype)), r.cfg
