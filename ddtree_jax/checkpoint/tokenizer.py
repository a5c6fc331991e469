"""Tokenizers for Kimi K2.x checkpoints and the Kimi chat turn format.

- `tiktoken.model` (Kimi): byte-level BPE ranks, Kimi's split pattern (Han runs split from other
  letters), and 256 reserved special tokens right after the base vocabulary (163,584 .. 163,839 for
  K2.x). Names of the specials come from `tokenizer_config.json` (`added_tokens_decoder`) when present,
  else the known K2 names below, else `<|reserved_token_{id}|>` (as Kimi's tokenization_kimi.py does).
- `tokenizer.json`: through HF `tokenizers`.
"""
from __future__ import annotations

import base64
import json
import os
from typing import Iterable, Mapping, Optional, Sequence

from ddtree_jax.checkpoint.safetensors_reader import CheckpointError

# Kimi's pre-tokenization pattern (tokenization_kimi.py `pat_str`).
KIMI_PAT_STR = "|".join([
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])
NUM_RESERVED_SPECIAL_TOKENS = 256

# Offsets from the first special id (163584 in K2.x), REFERENCE.md section 1.
KNOWN_SPECIALS = {0: "[BOS]", 1: "[EOS]", 2: "<|im_end|>", 3: "<|im_user|>", 4: "<|im_assistant|>",
                  10: "<|im_system|>", 17: "<|im_middle|>", 22: "<think>", 23: "</think>", 254: "[UNK]", 255: "[PAD]"}

ROLE_TOKENS = {"system": "<|im_system|>", "user": "<|im_user|>", "assistant": "<|im_assistant|>",
               "tool": "<|im_system|>"}


def load_tiktoken_ranks(path: str) -> dict[bytes, int]:
  """Parses a tiktoken BPE file: one `base64(token) rank` per line."""
  ranks: dict[bytes, int] = {}
  try:
    with open(path, "rb") as f:
      for lineno, line in enumerate(f, 1):
        line = line.strip()
        if not line:
          continue
        try:
          tok, rank = line.split()
          ranks[base64.b64decode(tok)] = int(rank)
        except ValueError:
          raise CheckpointError(f"{path}: line {lineno} is not 'base64-token rank'") from None
  except OSError as e:
    raise CheckpointError(f"{path}: cannot read tokenizer file ({e})") from None
  return ranks


def _added_tokens(dir_path: str) -> dict[int, str]:
  p = os.path.join(dir_path, "tokenizer_config.json")
  if not os.path.exists(p):
    return {}
  with open(p) as f:
    d = json.load(f)
  return {int(k): v["content"] for k, v in (d.get("added_tokens_decoder") or {}).items()}


class _ChatMixin:
  def encode_chat(self, messages, **kw) -> list[int]:
    """A user text (str) or a list of {"role", "content"} messages -> ids of the Kimi chat prompt."""
    if isinstance(messages, str):
      messages = [{"role": "user", "content": messages}]
    return self.encode(chat_prompt(messages, **kw), allow_special=True)


class KimiTokenizer(_ChatMixin):
  """Kimi's tiktoken tokenizer. ids: base BPE [0, n) + 256 specials [n, n + 256)."""

  def __init__(self, path: str, special_names: Optional[Mapping[int, str]] = None):
    import tiktoken
    ranks = load_tiktoken_ranks(path)
    n = len(ranks)
    names = {n + off: name for off, name in KNOWN_SPECIALS.items()}
    names.update(_added_tokens(os.path.dirname(os.path.abspath(path))))
    names.update(special_names or {})
    self.special_tokens = {names.get(i, f"<|reserved_token_{i}|>"): i for i in range(n, n + NUM_RESERVED_SPECIAL_TOKENS)}
    self.num_base_tokens = n
    self.encoding = tiktoken.Encoding(name=f"kimi:{os.path.basename(path)}", pat_str=KIMI_PAT_STR,
                                      mergeable_ranks=ranks, special_tokens=self.special_tokens)

  @property
  def vocab_size(self) -> int:
    return self.num_base_tokens + NUM_RESERVED_SPECIAL_TOKENS

  def encode(self, text: str, *, allow_special: bool = True) -> list[int]:
    """allow_special: special-token strings in `text` become their ids (else they are encoded as text)."""
    return self.encoding.encode(text, allowed_special="all" if allow_special else set(), disallowed_special=())

  def decode(self, ids: Iterable[int]) -> str:
    return self.encoding.decode(list(ids))

  def token_id(self, token: str) -> int:
    if token in self.special_tokens:
      return self.special_tokens[token]
    ids = self.encoding.encode_single_token(token.encode("utf-8"))
    return ids

  @property
  def bos_id(self) -> int:
    return self.special_tokens["[BOS]"]

  @property
  def eos_id(self) -> int:
    return self.special_tokens["[EOS]"]

  @property
  def im_end_id(self) -> int:
    return self.special_tokens["<|im_end|>"]


class HFTokenizer(_ChatMixin):
  """A `tokenizer.json` through HF tokenizers."""

  def __init__(self, path: str):
    import tokenizers
    try:
      self.tok = tokenizers.Tokenizer.from_file(path)
    except Exception as e:
      raise CheckpointError(f"{path}: cannot load tokenizer.json ({e})") from None
    self.special_tokens = {t.content: i for i, t in self.tok.get_added_tokens_decoder().items() if t.special}

  @property
  def vocab_size(self) -> int:
    return self.tok.get_vocab_size(with_added_tokens=True)

  def encode(self, text: str, *, allow_special: bool = True) -> list[int]:
    if not allow_special:
      raise NotImplementedError("HFTokenizer always parses special tokens in text")
    return self.tok.encode(text, add_special_tokens=False).ids

  def decode(self, ids: Iterable[int]) -> str:
    return self.tok.decode(list(ids), skip_special_tokens=False)

  def token_id(self, token: str) -> int:
    i = self.tok.token_to_id(token)
    if i is None:
      raise KeyError(f"token {token!r} is not in the vocabulary")
    return i


def load_tokenizer(path: str):
  """A directory (or file): `tiktoken.model` -> KimiTokenizer, else `tokenizer.json` -> HFTokenizer."""
  if os.path.isfile(path):
    return KimiTokenizer(path) if path.endswith(".model") else HFTokenizer(path)
  for name, cls in (("tiktoken.model", KimiTokenizer), ("tokenizer.json", HFTokenizer)):
    p = os.path.join(path, name)
    if os.path.exists(p):
      return cls(p)
  raise CheckpointError(f"{path}: no tiktoken.model and no tokenizer.json")


def chat_prompt(messages: Sequence[Mapping[str, str]], *, add_generation_prompt: bool = True,
                default_system: Optional[str] = None) -> str:
  """The Kimi turn format:
  `<|im_system|>system<|im_middle|>...<|im_end|><|im_user|>user<|im_middle|>...<|im_end|><|im_assistant|>assistant<|im_middle|>`.
  A message's `name` replaces its role name when given. `default_system` is inserted when the
  conversation does not start with a system message (K2's template uses "You are Kimi, an AI
  assistant created by Moonshot AI.")."""
  parts = []
  if default_system is not None and (not messages or messages[0]["role"] != "system"):
    parts.append(f"<|im_system|>system<|im_middle|>{default_system}<|im_end|>")
  for m in messages:
    role = m["role"]
    if role not in ROLE_TOKENS:
      raise ValueError(f"chat_prompt: unknown role {role!r}; expected one of {sorted(ROLE_TOKENS)}")
    parts.append(f"{ROLE_TOKENS[role]}{m.get('name', role)}<|im_middle|>{m['content']}<|im_end|>")
  if add_generation_prompt:
    parts.append("<|im_assistant|>assistant<|im_middle|>")
  return "".join(parts)


def encode_chat(tokenizer, messages, **kw) -> list[int]:
  if isinstance(messages, str):
    messages = [{"role": "user", "content": messages}]
  return tokenizer.encode(chat_prompt(messages, **kw), allow_special=True)
