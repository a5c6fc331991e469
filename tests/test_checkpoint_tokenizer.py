"""Kimi tiktoken tokenizer (split pattern, 256 specials after the base vocabulary), tokenizer.json, chat format."""
import base64
import json

import pytest

from ddtree_jax.checkpoint.tokenizer import (HFTokenizer, KimiTokenizer, chat_prompt, encode_chat, load_tokenizer)


def write_tiktoken(path, merges):
  ranks = [bytes([i]) for i in range(256)] + [m if isinstance(m, bytes) else m.encode() for m in merges]
  with open(path, "w") as f:
    for r, tok in enumerate(ranks):
      f.write(f"{base64.b64encode(tok).decode()} {r}\n")
  return len(ranks)


@pytest.fixture
def kimi(tmp_path):
  # merges in rank order; "文E" would only be used if Han and Latin were pre-tokenized together
  n = write_tiktoken(tmp_path / "tiktoken.model", ["he", "ll", "hell", "hello", "文E", " w", "or", " wor", " world",
                                                   "文".encode()[:2], "文"])
  return KimiTokenizer(str(tmp_path / "tiktoken.model")), n


def test_specials_follow_the_base_vocabulary(kimi):
  tok, n = kimi
  assert tok.vocab_size == n + 256
  assert tok.bos_id == n and tok.eos_id == n + 1 and tok.im_end_id == n + 2
  assert tok.special_tokens["<|im_user|>"] == n + 3 and tok.special_tokens["<|im_assistant|>"] == n + 4
  assert tok.special_tokens["<|im_system|>"] == n + 10 and tok.special_tokens["<|im_middle|>"] == n + 17
  assert tok.special_tokens["<think>"] == n + 22 and tok.special_tokens["</think>"] == n + 23
  assert tok.special_tokens["[UNK]"] == n + 254 and tok.special_tokens["[PAD]"] == n + 255
  assert tok.special_tokens[f"<|reserved_token_{n + 5}|>"] == n + 5
  assert len(tok.special_tokens) == 256


def test_bpe_and_split_pattern(kimi):
  tok, n = kimi
  ids = tok.encode("hello world")
  assert ids == [256 + 3, 256 + 8]
  assert tok.decode(ids) == "hello world"
  text = "中文English混合 123456 ünïcödé\n\n"
  assert tok.decode(tok.encode(text)) == text
  # Kimi's pattern splits Han runs from Latin letters, so the merge "文E" never applies ...
  assert tok.encode("文English")[0] == 256 + 10
  assert 256 + 4 not in tok.encode("文English")
  # ... while a pattern that keeps them together would use it
  import tiktoken
  naive = tiktoken.Encoding("naive", pat_str=r"\S+|\s+", mergeable_ranks=tok.encoding._mergeable_ranks, special_tokens={})
  assert naive.encode("文E") == [256 + 4]


def test_specials_in_text(kimi):
  tok, n = kimi
  assert tok.encode("<|im_end|>") == [n + 2]
  assert tok.encode("<|im_end|>", allow_special=False) != [n + 2]


def test_special_names_from_tokenizer_config(tmp_path):
  n = write_tiktoken(tmp_path / "tiktoken.model", [])
  (tmp_path / "tokenizer_config.json").write_text(json.dumps(
      {"added_tokens_decoder": {str(n + 5): {"content": "<|im_custom|>", "special": True}}}))
  tok = load_tokenizer(str(tmp_path))
  assert isinstance(tok, KimiTokenizer) and tok.special_tokens["<|im_custom|>"] == n + 5


def test_chat_format(kimi):
  tok, n = kimi
  msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]
  s = chat_prompt(msgs)
  assert s == ("<|im_system|>system<|im_middle|>be brief<|im_end|><|im_user|>user<|im_middle|>hello<|im_end|>"
               "<|im_assistant|>assistant<|im_middle|>")
  ids = encode_chat(tok, msgs)
  sp = tok.special_tokens
  assert [i for i in ids if i >= n] == [sp["<|im_system|>"], sp["<|im_middle|>"], sp["<|im_end|>"], sp["<|im_user|>"],
                                         sp["<|im_middle|>"], sp["<|im_end|>"], sp["<|im_assistant|>"], sp["<|im_middle|>"]]
  assert tok.decode(ids) == s
  assert tok.encode_chat("hello") == tok.encode(chat_prompt([{"role": "user", "content": "hello"}]))
  assert chat_prompt([{"role": "user", "content": "x"}], default_system="S").startswith("<|im_system|>system<|im_middle|>S<|im_end|>")
  with pytest.raises(ValueError, match="unknown role"):
    chat_prompt([{"role": "robot", "content": "x"}])


def test_tokenizer_json(tmp_path):
  from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
  vocab = {"[UNK]": 0, "hello": 1, "world": 2}
  t = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
  t.pre_tokenizer = pre_tokenizers.Whitespace()
  t.add_special_tokens([AddedToken("<|im_end|>", special=True)])
  t.save(str(tmp_path / "tokenizer.json"))
  tok = load_tokenizer(str(tmp_path))
  assert isinstance(tok, HFTokenizer)
  assert tok.encode("hello world<|im_end|>") == [1, 2, 3]
  assert tok.special_tokens == {"<|im_end|>": 3} and tok.vocab_size == 4
  assert tok.token_id("world") == 2


def test_the_cli_reads_a_directorys_tokenizer_once_per_version(tmp_path):
  import os

  from ddtree_jax.cli.common import load_tokenizer as cli_load_tokenizer
  assert cli_load_tokenizer(str(tmp_path)) is None             # no tokenizer file
  n = write_tiktoken(tmp_path / "tiktoken.model", ["he"])
  first = cli_load_tokenizer(str(tmp_path))
  assert cli_load_tokenizer(str(tmp_path)) is first and first.vocab_size == n + 256
  # a rewritten tokenizer_config.json (a newer mtime) is read again: its special name is there
  config = tmp_path / "tokenizer_config.json"
  config.write_text(json.dumps({"added_tokens_decoder": {str(n + 5): {"content": "<|im_custom|>"}}}))
  os.utime(config, ns=(1, os.stat(tmp_path / "tiktoken.model").st_mtime_ns + 10**9))
  again = cli_load_tokenizer(str(tmp_path))
  assert again is not first and again.special_tokens["<|im_custom|>"] == n + 5
