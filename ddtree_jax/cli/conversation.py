"""The prompts of `ddtree-generate --interactive`: one line of stdin per turn, with the chat history under --chat.

A turn is a line the user types. Lines that start with "/" are commands: /reset (forget the conversation), /exit;
a line that starts with "//" is a prompt that starts with "/" (one slash is dropped: "//usr/bin" asks "/usr/bin").
Without --chat every line is a prompt of its own; with --chat the prompt of a turn is the whole conversation so far
(each user line and each reply, in the model's chat turn format), so the model sees the earlier turns (the engine
keeps no cache across generations: every turn prefills the conversation again).
"""
from __future__ import annotations

from typing import Optional

COMMANDS = ("/reset", "/exit")


class Conversation:
  def __init__(self, chat: bool):
    self.chat = chat
    self.messages: list[dict] = []        # {"role": "user" | "assistant", "content": text}

  def command(self, line: str) -> Optional[str]:
    """The command a line gives ("/reset", "/exit"), or None when it is a prompt. Unknown commands raise
    ValueError naming the known ones."""
    word = line.strip()
    if not word.startswith("/") or word.startswith("//"):
      return None
    if word not in COMMANDS:
      raise ValueError(f"unknown command {word!r} (commands: {', '.join(COMMANDS)})")
    if word == "/reset":
      self.messages = []
    return word

  @staticmethod
  def prompt_text(line: str) -> str:
    """The prompt a line that is not a command gives: the line, less one slash where it starts with "//"."""
    start = len(line) - len(line.lstrip())
    return line[:start] + line[start + 1:] if line.startswith("//", start) else line

  def prompt_ids(self, line: str, tokenizer) -> list[int]:
    """The token ids to generate from after the user typed `line` (under --chat: the conversation so far, then
    this line as the user's turn). Records nothing: `record` does, once the reply is there."""
    if not self.chat:
      return tokenizer.encode(line)
    return tokenizer.encode_chat(self.messages + [{"role": "user", "content": line}])

  def record(self, line: str, reply: str):
    """The user's line and the model's reply, as turns of the conversation (under --chat)."""
    if self.chat:
      self.messages += [{"role": "user", "content": line}, {"role": "assistant", "content": reply}]
