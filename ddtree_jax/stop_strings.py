"""Stop strings: a request ends once its decoded text contains one of its stop strings.

Text needs the tokenizer, so this runs on the host between compiled calls (Engine.run's `stop_when`); within a
call the device may run a few rounds past the stop, and those tokens are cut off. What a stopped request keeps:
- tokens: the fewest that complete a stop string, i.e. up to and including the token whose text completes it;
- text (`cut`): the decoded text up to, not including, the earliest stop string (the OpenAI API's convention).

Checking decodes only the tokens not yet checked plus enough earlier ones to hold a stop string that straddles
the two (a character is at most 4 UTF-8 bytes and a token at least one byte), so a long generation is not
re-decoded in full after every call.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence


def normalize(stops, *, what: str = "stop") -> tuple[str, ...]:
  """A stop string or a list of them -> a tuple of distinct non-empty strings; refuses anything else by `what`."""
  if stops is None:
    return ()
  if isinstance(stops, str):
    stops = [stops]
  if not isinstance(stops, (list, tuple)) or not all(isinstance(s, str) for s in stops):
    raise ValueError(f"{what}: expected a string or a list of strings, got {stops!r}")
  if any(s == "" for s in stops):
    raise ValueError(f"{what}: a stop string must not be empty")
  return tuple(dict.fromkeys(stops))


class StopStrings:
  """Per-request stop strings over a tokenizer's `decode(ids) -> str`.

  per_request[i]: the stop strings of request i (may be empty). An instance serves one generation: it remembers
  how many of each request's tokens are known not to complete a stop string (`reset` forgets that)."""

  def __init__(self, decode: Callable[[Sequence[int]], str], per_request: Sequence[Sequence[str]]):
    self._decode = decode
    self._stops = [normalize(s, what=f"stop strings of request {i}") for i, s in enumerate(per_request)]
    self._overlap = [4 * max(map(len, s)) + 4 if s else 0 for s in self._stops]   # tokens, see the docstring
    self._checked = [0] * len(self._stops)

  def reset(self):
    """Forget what was checked, for another generation of the same requests."""
    self._checked = [0] * len(self._stops)

  def __len__(self) -> int:
    return len(self._stops)

  @property
  def any(self) -> bool:
    return any(self._stops)

  def _find(self, i: int, text: str) -> Optional[int]:
    """The start of the earliest stop string of request i in text, or None."""
    found = [p for p in (text.find(s) for s in self._stops[i]) if p >= 0]
    return min(found) if found else None

  def tokens_to_keep(self, i: int, ids: Sequence[int]) -> Optional[int]:
    """None while request i's tokens `ids` (all of them so far) contain no stop string; else how many to keep.
    Call with the growing token list of one generation (the tokens before the last call's are not re-checked)."""
    stops, checked = self._stops[i], self._checked[i]
    if len(ids) < checked:
      raise ValueError(f"StopStrings: request {i} has {len(ids)} tokens, fewer than the {checked} already checked: "
                       "an instance serves one generation (reset() it for another)")
    if not stops or len(ids) == checked:
      return None
    start = max(0, checked - self._overlap[i])
    if self._find(i, self._decode(ids[start:])) is None:
      self._checked[i] = len(ids)
      return None
    for n in range(checked + 1, len(ids) + 1):     # the first token whose text completes a stop string
      if self._find(i, self._decode(ids[start:n])) is not None:
        self._checked[i] = n
        return n
    raise AssertionError("unreachable: the whole window holds a stop string")

  def cut(self, i: int, text: str) -> str:
    """Request i's text up to, not including, its earliest stop string (the whole text if it has none)."""
    at = self._find(i, text) if self._stops[i] else None
    return text if at is None else text[:at]

  def held_back(self, i: int, text: str) -> int:
    """How many characters at the end of text a stream must hold back: the longest end of text that begins one of
    request i's stop strings (it may yet become one)."""
    longest = 0
    for s in self._stops[i]:
      for k in range(min(len(s) - 1, len(text)), longest, -1):
        if text.endswith(s[:k]):
          longest = k
          break
    return longest
