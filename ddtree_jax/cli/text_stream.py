"""Printing one request's text as its tokens arrive (ddtree-generate --stream).

Tokens arrive a call at a time, and a call's tokens can end inside a character (byte-level BPE splits multi-byte
UTF-8 characters over tokens) or inside what may become a stop string. So the stream decodes the request's
tokens so far and prints only what can no longer change: it holds back a trailing incomplete character (which the
decoders show as U+FFFD) and any end of the text that begins a stop string; `finish` prints the rest of the final
text. Each update decodes the whole request: with the embedded model's HF tokenizer ~0.9 ms at 10K tokens, ~7 ms at
80K (measured on the CPU container), so it shows next to the host's ~1.5 ms per call only for very long outputs.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

from ddtree_jax.stop_strings import StopStrings

REPLACEMENT = "\ufffd"   # what tokenizers decode an incomplete UTF-8 sequence to


class TextStream:
  """write(text) receives the text in order; the pieces join to exactly `finish`'s final text."""

  def __init__(self, decode: Callable[[Sequence[int]], str], write: Callable[[str], None],
               stops: Optional[StopStrings] = None, index: int = 0):
    self._decode, self._write, self._stops, self._index = decode, write, stops, index
    self._ids: list[int] = []
    self._printed = ""

  def _emit(self, text: str):
    """Writes the part of text past what was printed (text must extend it; a decoder that rewrote earlier text
    gets its new text from where the printed text ends)."""
    if len(text) > len(self._printed):
      self._write(text[len(self._printed):])
      self._printed = text

  def add(self, ids: Sequence[int]):
    """The request's next tokens (Engine.run's stream callback)."""
    self._ids.extend(ids)
    text = self._decode(self._ids).rstrip(REPLACEMENT)
    if self._stops is not None:
      text = self._stops.cut(self._index, text)
      text = text[:len(text) - self._stops.held_back(self._index, text)]
    self._emit(text)

  def finish(self, final_text: str):
    """Prints the rest of the request's final text (e.g. StopStrings.cut of its decoded tokens)."""
    self._emit(final_text)
