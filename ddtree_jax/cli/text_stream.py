"""Printing one request's text as its tokens arrive (ddtree-generate --stream).

Tokens arrive a call at a time, and a call's tokens can end inside a character (byte-level BPE splits multi-byte
UTF-8 characters over tokens) or inside what may become a stop string. So the stream prints only what can no
longer change: it holds back a trailing incomplete character (which the
decoders show as U+FFFD) and any end of the text that begins a stop string; `finish` prints the rest of the final
text.

The text is built a window at a time, so that an update does not decode the whole request (with the embedded
model's HF tokenizer that took ~0.9 ms at 10K tokens and ~7 ms at 80K, on the CPU container): an update decodes the
tokens of the previous committed update (context) plus the new ones, and the text past the context's decoding is
new. A window is committed up to its last token that ends a character. For decoders that map tokens to bytes and
decode UTF-8 (byte-level BPE: the Kimi tiktoken and embedded HF tokenizers, the byte tokenizer) this is the full
decoding; a decoder that joins or cleans across tokens may differ at a window's start, and `finish` then prints the
final text from where the printed text ends.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

from ddtree_jax.stop_strings import StopStrings

REPLACEMENT = "\ufffd"   # what tokenizers decode an incomplete UTF-8 sequence to
MAX_PENDING_TOKENS = 64  # uncommitted tokens past which TextStream stops trying earlier ends of its window


class TextStream:
  """write(text) receives the text in order; the pieces join to exactly `finish`'s final text."""

  def __init__(self, decode: Callable[[Sequence[int]], str], write: Callable[[str], None],
               stops: Optional[StopStrings] = None, index: int = 0):
    self._decode, self._write, self._stops, self._index = decode, write, stops, index
    self._ids: list[int] = []
    self._text = ""                      # the decoding of ids[:read], committed a window at a time
    self._context = 0                    # ids[context:read] are decoded again with the new ones, as context
    self._read = 0
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
    context = self._decode(self._ids[self._context:self._read])
    window = self._decode(self._ids[self._context:])
    # Commit up to the last token that ends a character: the whole window, or (a character of at most 4 bytes
    # split over its last tokens) one of the 3 before its end. After a long run without a character's end
    # (invalid bytes: text of U+FFFDs) only the whole window is tried, so an update never decodes more than what
    # decoding the whole request decoded.
    backoff = 4 if len(self._ids) - self._read <= MAX_PENDING_TOKENS else 1
    for end in range(len(self._ids), max(self._read, len(self._ids) - backoff), -1):
      done = window if end == len(self._ids) else self._decode(self._ids[self._context:end])
      if len(done) >= len(context) and not done.endswith(REPLACEMENT):   # (tokens with no text move it on too)
        self._text += done[len(context):]
        self._context, self._read = self._read, end
        context = done
        break
    text = self._text + window[len(context):].rstrip(REPLACEMENT)
    if self._stops is not None:
      text = self._stops.cut(self._index, text)
      text = text[:len(text) - self._stops.held_back(self._index, text)]
    self._emit(text)

  def finish(self, final_text: str):
    """Prints the rest of the request's final text (e.g. StopStrings.cut of its decoded tokens)."""
    self._emit(final_text)
