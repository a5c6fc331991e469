"""Checkpoints: HF safetensors (Kimi K2.x / DeepSeek-V3 target, DFlash drafter) and converted orbax directories."""
from ddtree_jax.checkpoint.safetensors_reader import CheckpointError, SafetensorsDir
from ddtree_jax.checkpoint.drafter_config import DrafterConfig, drafter_config_from_hf_dict, load_drafter_config
from ddtree_jax.checkpoint.load import TargetReader, basic_shardings, build_module, load_drafter, load_target
from ddtree_jax.checkpoint.drafter_names import DrafterReader, read_drafter
from ddtree_jax.checkpoint.convert import convert_checkpoint
from ddtree_jax.checkpoint.orbax_io import is_converted, restore_drafter, restore_target

__all__ = [
    "CheckpointError", "SafetensorsDir", "DrafterConfig", "drafter_config_from_hf_dict", "load_drafter_config",
    "TargetReader", "basic_shardings", "build_module", "load_drafter", "load_target", "DrafterReader",
    "read_drafter", "convert_checkpoint", "is_converted", "restore_drafter", "restore_target",
]
