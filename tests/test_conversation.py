"""ddtree-generate --interactive's turns (ddtree_jax/cli/conversation.py): commands, prompts without and with the
chat history; and `ddtree-generate --interactive --chat` end to end on the embedded default model."""
import os
import re

import pytest

from ddtree_jax.checkpoint.tokenizer import chat_prompt
from ddtree_jax.cli.conversation import Conversation
from tests.generate_cli import ROOT, run_generate


class Recorder:
  """A tokenizer that returns what it was asked to encode (ids are not the point here)."""

  def encode(self, text):
    return ["text", text]

  def encode_chat(self, messages):
    return ["chat", chat_prompt([dict(m) for m in messages])]


def test_plain_prompts_are_independent():
  c = Conversation(chat=False)
  assert c.prompt_ids("def f(x):", Recorder()) == ["text", "def f(x):"]
  c.record("def f(x):", "  return x")
  assert c.prompt_ids("class A:", Recorder()) == ["text", "class A:"] and c.messages == []


def test_chat_prompts_carry_the_conversation_until_reset():
  c = Conversation(chat=True)
  first = c.prompt_ids("hi", Recorder())
  assert first == ["chat", chat_prompt([{"role": "user", "content": "hi"}])]
  assert c.prompt_ids("hi", Recorder()) == first          # asking again records nothing
  c.record("hi", "hello")
  second = c.prompt_ids("and?", Recorder())[1]
  assert second == chat_prompt([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                                {"role": "user", "content": "and?"}])
  assert second.startswith(first[1][:-len("<|im_assistant|>assistant<|im_middle|>")])   # the first turn, then more
  assert c.command("/reset") == "/reset" and c.messages == []
  assert c.prompt_ids("hi", Recorder()) == first


def test_commands():
  c = Conversation(chat=True)
  assert c.command("hello /reset") is None and c.command("  /exit ") == "/exit"
  with pytest.raises(ValueError, match=r"unknown command '/quit' \(commands: /reset, /exit\)"):
    c.command("/quit")
  # "//" escapes a prompt that starts with a slash; one slash is dropped, the rest of the line is kept as typed
  assert c.command("//usr/bin") is None and c.command(" //reset") is None
  assert c.prompt_text("//usr/bin") == "/usr/bin" and c.prompt_text("  //reset ") == "  /reset "
  assert c.prompt_text("a // b") == "a // b" and c.prompt_text("/x") == "/x"


def test_the_random_fallbacks_byte_tokenizer_takes_a_conversation():
  from ddtree_jax.cli.common import ByteTokenizer
  tok = ByteTokenizer()
  messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
  assert tok.decode(tok.encode_chat(messages)) == "user: hi\nassistant: yo\nassistant: "
  assert tok.encode_chat("hi") == tok.encode("user: hi\nassistant: ")


@pytest.mark.e2e
def test_interactive_chat_end_to_end_on_the_embedded_model():
  """Three turns and a /reset through the CLI: each turn's prompt is the conversation so far in the chat format
  (its length in tokens, from the turn's summary line, is that of the tokenizer's chat encoding of the turns
  printed so far), and after /reset the first line gets the first reply again (greedy). The stop string "\\n"
  keeps every reply on one line of stdout (the embedded model writes Python)."""
  from ddtree_jax.checkpoint.tokenizer import load_tokenizer
  r = run_generate("--interactive", "--chat", "--mode=ddtree", "--budget=4", "--max_new_tokens=8", "--stop=\n",
                   stdin="def f(x):\nand then?\n/reset\ndef f(x):\n")
  assert r.returncode == 0, r.stderr[-3000:]
  replies = r.stdout.split("\n")
  assert len(replies) == 4 and replies[3] == "", r.stdout          # three replies, each ended by a newline
  prompt_lengths = [int(n) for n in re.findall(r"rounds after a (\d+)-token prompt", r.stderr)]
  assert "(conversation forgotten)" in r.stderr and len(prompt_lengths) == 3, r.stderr[-3000:]
  tok = load_tokenizer(os.path.join(ROOT, "checkpoints", "default", "target"))
  first = [{"role": "user", "content": "def f(x):"}]
  second = first + [{"role": "assistant", "content": replies[0]}, {"role": "user", "content": "and then?"}]
  assert prompt_lengths == [len(tok.encode_chat(first)), len(tok.encode_chat(second)), len(tok.encode_chat(first))]
  assert replies[2] == replies[0] and prompt_lengths[1] > prompt_lengths[0]
