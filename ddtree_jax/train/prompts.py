"""Benchmark prompts from the test split: a few consecutive lines of a test-split stdlib file, ending
at a line break, `min_tokens`..`max_tokens` tokens long (so all prompts share one compiled shape)."""
from __future__ import annotations

import json
from typing import Optional

import numpy as np

from ddtree_jax.train import corpus


def test_prompts(tok, n: int = 24, *, min_tokens: int = 64, max_tokens: int = 90, seed: int = 0,
                 docs: Optional[list] = None) -> list[dict]:
  docs = docs if docs is not None else corpus.load_split("test")
  rng = np.random.default_rng(seed)
  order = rng.permutation(len(docs))
  out = []
  for i in order:
    rel, text = docs[i]
    lines = text.splitlines(keepends=True)
    if len(lines) < 20:
      continue
    for _ in range(10):
      start = int(rng.integers(0, max(1, len(lines) - 40)))
      if not lines[start].strip():
        continue
      chunk = ""
      for ln in lines[start:]:
        chunk += ln
        if len(tok.encode(chunk)) >= min_tokens:
          break
      if min_tokens <= len(tok.encode(chunk)) <= max_tokens:
        out.append({"prompt": chunk, "file": rel, "line": start + 1})
        break
    if len(out) >= n:
      break
  return out


def write_jsonl(path: str, prompts: list[dict]):
  with open(path, "w") as f:
    for p in prompts:
      f.write(json.dumps(p) + "\n")


def read_jsonl(path: str) -> list[dict]:
  with open(path) as f:
    return [json.loads(l) for l in f if l.strip()]
