"""Pieces shared by the absl CLIs: dtype names, model loading, the embedded default, the flags that
several CLIs take (defined here once)."""
from __future__ import annotations

import functools
import os
from typing import Optional

import jax.numpy as jnp
from absl import flags

from ddtree_jax.spec.prefill import DEFAULT_CHUNK

flags.DEFINE_integer("prefill_chunk", DEFAULT_CHUNK, "prompt tokens per prefill forward; long prompts are "
                     "prefilled in chunks of this many tokens (less activation memory), 0 = in one forward")

flags.DEFINE_integer("rounds_per_call", None, "rounds each compiled call runs on the device before the host reads "
                     "the done flags (same tokens; the host's per-call cost is shared by them); default: the engine's "
                     "(8; 1 with --budget=auto, which allows no other)", lower_bound=1)

flags.DEFINE_enum("moe_layout", "auto", ["auto", "as_is", "k_chunks"],
                  "INT4 experts' layout in memory: auto = k-chunked for the GPU kernels on a GPU (each kernel tile one "
                  "contiguous block), as loaded elsewhere; as_is = as loaded; k_chunks = k-chunked on any backend")

DTYPES = {"bfloat16": jnp.bfloat16, "bf16": jnp.bfloat16, "float32": jnp.float32, "fp32": jnp.float32}

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_TARGET_DIR = os.path.join(REPO_ROOT, "checkpoints", "default", "target")
DEFAULT_DRAFTER_DIR = os.path.join(REPO_ROOT, "checkpoints", "default", "drafter")


class UsageError(ValueError):
  """A bad flag value; the CLI prints it and exits non-zero."""


def parse_dtype(name: str):
  if name not in DTYPES:
    raise UsageError(f"--dtype={name!r}: expected one of {sorted(DTYPES)}")
  return DTYPES[name]


def parse_budget(text: str):
  """--budget: 'auto' or an integer >= 1."""
  if text.strip().lower() == "auto":
    return "auto"
  try:
    n = int(text)
  except ValueError:
    raise UsageError(f"--budget={text}: expected an integer >= 1 or 'auto'") from None
  if n < 1:
    raise UsageError(f"--budget={n}: must be >= 1")
  return n


def parse_prefill_chunk(value: int) -> Optional[int]:
  """--prefill_chunk: an integer >= 0 -> the Engine's prefill_chunk (None for 0: one forward)."""
  from ddtree_jax.spec.prefill import check_chunk
  try:
    return check_chunk(value, "--prefill_chunk")
  except ValueError as e:
    raise UsageError(str(e)) from None


def model_dirs(model_dir: Optional[str], drafter_dir: Optional[str]):
  """The directories load_models reads: (model_dir, drafter_dir, label or None). model_dir None: the embedded
  default (and its drafter when drafter_dir is None); (None, None, None) when there is none (the random fallback).
  Raises UsageError naming the flag of a directory that does not exist."""
  label = None
  if model_dir is None:
    if not os.path.exists(os.path.join(DEFAULT_TARGET_DIR, "config.json")):
      return None, None, None
    model_dir = DEFAULT_TARGET_DIR
    if drafter_dir is None and os.path.exists(os.path.join(DEFAULT_DRAFTER_DIR, "config.json")):
      drafter_dir = DEFAULT_DRAFTER_DIR
    label = "embedded default model (checkpoints/default)"
  for flag, path in (("--model_dir", model_dir), ("--drafter_dir", drafter_dir)):
    if path is not None and not os.path.isdir(path):
      raise UsageError(f"{flag}={path}: no such directory")
  return model_dir, drafter_dir, label


def load_models(model_dir: Optional[str], drafter_dir: Optional[str], dtype, *, want_drafter: bool, mesh=None):
  """Returns (target, target_cfg, drafter, drafter_cfg, tokenizer, label). With a mesh, checkpoint
  weights are read straight into their shards (ddtree_jax.sharding rules)."""
  from ddtree_jax.checkpoint.load import build_module, load_drafter, load_target
  from ddtree_jax.model.dflash import DFlashDrafter
  from flax import nnx

  model_dir, drafter_dir, label = model_dirs(model_dir, drafter_dir)
  if model_dir is None:
    return random_models(dtype, want_drafter=want_drafter)
  target, cfg = load_target(model_dir, dtype=dtype, mesh=mesh)
  drafter = dcfg = None
  if want_drafter:
    if drafter_dir is None:
      raise UsageError("this mode needs a drafter: pass --drafter_dir (or use --mode=ar)")
    params, dcfg = load_drafter(drafter_dir, cfg, dtype=dtype, mesh=mesh)
    drafter = build_module(lambda: DFlashDrafter(dcfg, dtype=dtype, rngs=nnx.Rngs(0)), params)
  tokenizer = load_tokenizer(model_dir)
  return target, cfg, drafter, dcfg, tokenizer, label or model_dir


def target_config_and_tokenizer(model_dir: Optional[str]):
  """What load_models(model_dir, ...) will load, read before any weight is: (the target's config, its tokenizer or
  None). model_dir None: the embedded default, or the random fallback's tiny config and byte tokenizer."""
  from ddtree_jax.config import load_config
  model_dir, _, _ = model_dirs(model_dir, None)
  if model_dir is None:
    from configs.tiny import tiny
    return tiny(), ByteTokenizer()
  return load_config(model_dir), load_tokenizer(model_dir)


def check_drafter_config(model_dir: Optional[str], drafter_dir: Optional[str], target_cfg, mode: str) -> None:
  """Before any weight is read, for a mode that drafts: raises UsageError when there is no drafter, ConfigError
  when the one load_models would load (drafter_dir, or the embedded default's) cannot serve target_cfg."""
  from ddtree_jax.checkpoint import orbax_io
  from ddtree_jax.checkpoint.drafter_config import load_drafter_config
  model_dir, drafter_dir, _ = model_dirs(model_dir, drafter_dir)
  if model_dir is None:
    return                                   # the random fallback makes its own drafter
  if drafter_dir is None:
    raise UsageError(f"--mode={mode} needs a drafter: pass --drafter_dir (or use --mode=ar)")
  if orbax_io.is_converted(drafter_dir):
    load_drafter_config(os.path.join(drafter_dir, "drafter_config.json")).check_against(target_cfg, where=drafter_dir)
  else:
    load_drafter_config(drafter_dir, target=target_cfg)


def load_tokenizer(model_dir: str):
  """The directory's tokenizer (tiktoken.model, else tokenizer.json), or None. Read once per version of its files:
  the CLI asks for it before loading (to check the prompts) and again in load_models (~0.5 s for Kimi's)."""
  files = [os.path.join(model_dir, f) for f in ("tiktoken.model", "tokenizer.json", "tokenizer_config.json")]
  if not any(os.path.exists(f) for f in files[:2]):
    return None
  versions = tuple(os.stat(f).st_mtime_ns if os.path.exists(f) else None for f in files)
  return _read_tokenizer(os.path.abspath(model_dir), versions)


@functools.lru_cache(maxsize=4)
def _read_tokenizer(model_dir: str, versions: tuple):
  del versions                               # part of the cache key only: rewritten files are read again
  from ddtree_jax.checkpoint.tokenizer import load_tokenizer as _load
  return _load(model_dir)


def random_models(dtype, *, want_drafter: bool, seed: int = 0):
  """A small random-weight target (+ drafter): for trying the engine without any checkpoint.
  Its output is meaningless text-wise; speculative modes still reproduce AR exactly."""
  from flax import nnx
  from configs.tiny import tiny, tiny_drafter
  from ddtree_jax.model.deepseek import DeepseekV3
  from ddtree_jax.model.dflash import DFlashDrafter
  cfg = tiny()
  target = DeepseekV3(cfg, dtype=dtype, rngs=nnx.Rngs(seed))
  drafter = dcfg = None
  if want_drafter:
    dcfg = tiny_drafter(cfg)
    drafter = DFlashDrafter(dcfg, dtype=dtype, rngs=nnx.Rngs(seed + 1))
  return (target, cfg, drafter, dcfg, ByteTokenizer(),
          "RANDOM-WEIGHT tiny model with a byte tokenizer (no checkpoint found; its output is not text)")


class ByteTokenizer:
  """Token id = byte value (vocabulary 256): lets the random tiny model take text prompts."""

  def encode(self, text: str) -> list[int]:
    return list(text.encode("utf-8"))

  def encode_chat(self, messages) -> list[int]:
    """A text, or {"role", "content"} messages as "role: content" lines (this tokenizer has no chat tokens)."""
    if isinstance(messages, str):            # one user message, as the Kimi tokenizers take a string
      messages = [{"role": "user", "content": messages}]
    return self.encode("".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant: ")

  def decode(self, ids) -> str:
    return bytes(int(i) % 256 for i in ids).decode("utf-8", errors="replace")
