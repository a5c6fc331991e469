"""Stop strings (ddtree_jax/stop_strings.py) and the CLI's text stream (ddtree_jax/cli/text_stream.py) on a
byte-level decoder: one token per UTF-8 byte, so multi-byte characters split over tokens as byte-level BPE
splits them."""
import numpy as np
import pytest

from ddtree_jax.cli.text_stream import TextStream
from ddtree_jax.stop_strings import StopStrings, normalize

ALPHABET = ["a", "b", " ", "é", "€", "😀", "\n"]     # 1, 1, 1, 2, 3 and 4 UTF-8 bytes


def decode(ids):
  return bytes(ids).decode("utf-8", errors="replace")


def encode(text):
  return list(text.encode("utf-8"))


def fewest_tokens(ids, stops):
  """Brute force: the fewest tokens whose full text holds a stop string, or None."""
  return next((n for n in range(1, len(ids) + 1) if any(s in decode(ids[:n]) for s in stops)), None)


def feed(stops_obj, i, ids, chunks):
  """tokens_to_keep on the growing token list, `chunks` tokens at a time (as the engine calls it)."""
  for end in list(range(chunks, len(ids), chunks)) + [len(ids)]:
    n = stops_obj.tokens_to_keep(i, ids[:end])
    if n is not None:
      return n
  return None


def test_fewest_tokens_and_cut_on_random_text():
  rng = np.random.default_rng(0)
  for trial in range(300):
    text = "".join(rng.choice(ALPHABET, size=int(rng.integers(1, 200))))
    ids = encode(text)
    k = int(rng.integers(0, len(text)))
    stops = [text[k:k + int(rng.integers(1, 6))], "".join(rng.choice(ALPHABET, size=3))]
    want = fewest_tokens(ids, stops)
    chunk = int(rng.integers(1, 40))
    got = feed(StopStrings(decode, [stops]), 0, ids, chunk)
    assert got == want, (trial, text, stops, chunk)
    # The text ends before the occurrence that is completed first (of two completed by the same character, the
    # longer): the text of every occurrence in the whole text, ordered by (end, start).
    ends = [(p + len(s), p) for s in stops for p in range(len(text)) if text.startswith(s, p)]
    cut = StopStrings(decode, [stops]).cut(0, decode(ids[:got]))
    assert cut == text[:min(ends)[1]], (trial, text, stops)


def test_a_stop_string_split_over_calls_and_over_a_multibyte_character():
  text = "ab" * 200 + "x€y" + "ab" * 10
  ids = encode(text)
  at = text.index("€y")
  stops = StopStrings(decode, [["€y"]])
  first = len(encode(text[:at])) + 1          # the call ends inside the 3 bytes of the euro sign
  assert stops.tokens_to_keep(0, ids[:first]) is None
  n = stops.tokens_to_keep(0, ids)
  assert n == len(encode(text[:at + 2])) and stops.cut(0, decode(ids[:n])) == text[:at]


def test_an_instance_serves_one_generation():
  stops = StopStrings(decode, [["b"]])
  assert stops.tokens_to_keep(0, encode("aaaa")) is None
  with pytest.raises(ValueError, match="request 0 has 2 tokens, fewer than the 4 already checked"):
    stops.tokens_to_keep(0, encode("ab"))
  stops.reset()
  assert stops.tokens_to_keep(0, encode("ab")) == 2


def test_requests_have_their_own_stops_and_none_means_never():
  stops = StopStrings(decode, [["b"], [], ("zz", "a")])
  ids = encode("aab")
  assert [stops.tokens_to_keep(i, ids) for i in range(3)] == [3, None, 1]
  assert stops.any and not StopStrings(decode, [[], ()]).any
  assert stops.cut(1, "aab") == "aab"


def test_held_back_is_the_longest_end_that_begins_a_stop():
  stops = StopStrings(decode, [["abc", "bd"]])
  assert stops.held_back(0, "xxab") == 2
  assert stops.held_back(0, "xxb") == 1
  assert stops.held_back(0, "xxabc") == 0        # a whole stop string is cut, not held back
  assert stops.held_back(0, "x") == 0


@pytest.mark.parametrize("bad, message", [
    ("", "must not be empty"), (["a", ""], "must not be empty"), (5, "expected a string or a list of strings"),
    ([1, "a"], "expected a string or a list of strings")])
def test_bad_stop_strings_are_refused_by_name(bad, message):
  with pytest.raises(ValueError, match=message) as e:
    normalize(bad, what="x.jsonl:3: \"stop\"")
  assert "x.jsonl:3" in str(e.value)
  assert normalize(["a", "b", "a"]) == ("a", "b") and normalize(None) == () and normalize("s") == ("s",)


@pytest.mark.parametrize("chunk", [1, 2, 5])
def test_text_stream_prints_only_final_text_in_order(chunk):
  text = "aé€ b\n€€é stop here and more"
  ids = encode(text)
  for stop_list in ([], ["stop"], ["€€é s"]):
    stops = StopStrings(decode, [stop_list])
    kept = feed(StopStrings(decode, [stop_list]), 0, ids, chunk) or len(ids)
    final = stops.cut(0, decode(ids[:kept]))
    pieces = []
    stream = TextStream(decode, pieces.append, stops)
    for start in range(0, kept, chunk):
      stream.add(ids[start:min(start + chunk, kept)])
      printed = "".join(pieces)
      assert "\ufffd" not in printed                    # no half character is ever printed
      assert final.startswith(printed)                  # only final text (no start of a stop string)
    stream.finish(final)
    assert "".join(pieces) == final
    assert final == (text[:text.index(stop_list[0])] if stop_list else text)


def test_text_stream_decodes_windows_and_prints_every_complete_character():
  """After every update the printed text is the whole decoding less a trailing incomplete character (as decoding
  everything would give), including invalid bytes inside the text; yet no decode sees more than the last few
  updates' tokens, so a long request is not decoded again in full at each update."""
  rng = np.random.default_rng(3)
  for trial in range(40):
    ids = encode("".join(rng.choice(ALPHABET, size=300)))
    for at in rng.integers(0, len(ids), size=3):           # lone continuation or lead bytes: U+FFFD in the text
      ids.insert(int(at), int(rng.choice([0x80, 0xE2])))
    chunk = int(rng.integers(1, 8))
    seen = []
    pieces = []
    stream = TextStream(lambda t: seen.append(len(t)) or decode(t), pieces.append)
    for start in range(0, len(ids), chunk):
      stream.add(ids[start:start + chunk])
      assert "".join(pieces) == decode(ids[:start + chunk]).rstrip("\ufffd")
    stream.finish(decode(ids))
    assert "".join(pieces) == decode(ids)
    assert max(seen) <= 4 * chunk + 8, (trial, chunk, max(seen))


def test_text_stream_run_of_invalid_bytes_costs_no_more_than_whole_decodes():
  """Invalid bytes only (every window ends in U+FFFD, so nothing commits): the window grows, but an update then
  decodes its window once, not once per earlier end, so the stream decodes no more than decoding the whole request
  at every update would."""
  seen, pieces = [], []
  stream = TextStream(lambda t: seen.append(len(t)) or decode(t), pieces.append)
  for _ in range(300):
    stream.add([0x80] * 4)
  stream.add(encode("ok"))
  assert sum(seen) <= sum(range(4, 1201, 4)) + 2 * 1202 + 3 * 64 * 16     # (+ the first 64 tokens' earlier ends)
  final = decode([0x80] * 1200 + encode("ok"))
  assert "".join(pieces) == final                                     # the window committed at "ok"
  stream.finish(final)
  assert "".join(pieces) == final
