"""Host cost of --stream's text: TextStream (a window of tokens per update) against decoding the whole request at
every update (what it did before session 25), on the embedded model's tokenizer, CPU only.

  .venv/bin/python benchmarks/stream_decode.py --tokens 80000 --per_update 32
"""
from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from ddtree_jax.cli.common import load_tokenizer  # noqa: E402
from ddtree_jax.cli.text_stream import REPLACEMENT, TextStream  # noqa: E402


def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--tokens", type=int, default=80000)
  ap.add_argument("--per_update", type=int, default=32, help="tokens a compiled call adds (one stream update)")
  ap.add_argument("--model_dir", default=os.path.join(ROOT, "checkpoints", "default", "target"))
  args = ap.parse_args()
  tok = load_tokenizer(args.model_dir)
  package = os.path.join(ROOT, "ddtree_jax")
  source = "".join(open(os.path.join(package, f)).read() for f in sorted(os.listdir(package)) if f.endswith(".py"))
  ids = tok.encode(source * (1 + args.tokens // max(1, len(tok.encode(source)))))[:args.tokens]
  updates = [ids[i:i + args.per_update] for i in range(0, len(ids), args.per_update)]
  final = tok.decode(ids)
  for name in ("window (TextStream)", "whole request"):
    pieces, seen, times = [], [], []
    stream = TextStream(tok.decode, pieces.append) if name.startswith("window") else None
    for u in updates:
      t = time.perf_counter()
      if stream is not None:
        stream.add(u)
      else:                                        # what TextStream.add did before: decode everything so far
        seen.extend(u)
        pieces[:] = [tok.decode(seen).rstrip(REPLACEMENT)]
      times.append(time.perf_counter() - t)
    if stream is not None:
      stream.finish(final)
    text = "".join(pieces)
    last = times[-1000:]
    print(f"{name}: {len(ids)} tokens in {len(updates)} updates: {sum(times):.3f} s in all, last {len(last)} updates "
          f"{1e3 * sum(last) / len(last):.3f} ms each; text equals one decode: {text == final}")


if __name__ == "__main__":
  main()
