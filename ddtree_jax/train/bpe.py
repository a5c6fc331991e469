"""A byte-level BPE tokenizer (HF `tokenizers`) trained on the train split, saved as `tokenizer.json`.

Special tokens: `<|endoftext|>` (id 0: document separator, EOS, padding) and `<|mask|>` (id 1: the
DFlash drafter's mask token). Byte-level, so every string round-trips exactly.
"""
from __future__ import annotations

import os
from typing import Iterable, Sequence

import numpy as np

EOS_TOKEN, MASK_TOKEN = "<|endoftext|>", "<|mask|>"


def train_bpe(texts: Iterable[str], vocab_size: int, out_path: str | None = None, min_frequency: int = 2):
  """Trains the tokenizer on `texts` and (optionally) saves it; returns a `BPETokenizer`."""
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
  tok = Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, show_progress=False,
                                special_tokens=[EOS_TOKEN, MASK_TOKEN],
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
  tok.train_from_iterator(texts, trainer)
  if out_path:
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    tok.save(out_path)
  return BPETokenizer(tok)


class BPETokenizer:
  """encode / decode over an HF `tokenizers.Tokenizer` (the interface the CLIs use)."""

  def __init__(self, tok):
    self.tok = tok
    self.eos_id = tok.token_to_id(EOS_TOKEN)
    self.mask_id = tok.token_to_id(MASK_TOKEN)

  @classmethod
  def load(cls, path: str) -> "BPETokenizer":
    from tokenizers import Tokenizer
    if os.path.isdir(path):
      path = os.path.join(path, "tokenizer.json")
    return cls(Tokenizer.from_file(path))

  @property
  def vocab_size(self) -> int:
    return self.tok.get_vocab_size()

  def encode(self, text: str) -> list[int]:
    return self.tok.encode(text, add_special_tokens=False).ids

  encode_chat = encode   # a code model: no chat format

  def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
    return [e.ids for e in self.tok.encode_batch(list(texts), add_special_tokens=False)]

  def decode(self, ids) -> str:
    return self.tok.decode([int(i) for i in ids], skip_special_tokens=False)


def encode_documents(tok: BPETokenizer, texts: Sequence[str]) -> np.ndarray:
  """All documents as one int32 stream, each followed by EOS."""
  parts = []
  for ids in tok.encode_batch(texts):
    parts.append(np.asarray(ids + [tok.eos_id], np.int32))
  return np.concatenate(parts) if parts else np.zeros((0,), np.int32)
