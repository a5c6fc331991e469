"""ddtree-generate: generate with AR, DFlash or DDTree speculative decoding.

  ddtree-generate --prompt="def fib(n):" --mode=ddtree --budget=32
  ddtree-generate --model_dir=/path/to/Kimi-K2.6 --drafter_dir=/path/to/drafter --prompt_file=prompts.jsonl
  ddtree-generate --prompt_ids=1,2,3 --mode=ar --output_json=out.json
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys

from absl import app, flags

from ddtree_jax.cli import common  # noqa: F401  (--prefill_chunk, --moe_layout)
from ddtree_jax.cli import distributed  # noqa: F401  (--mesh and the jax.distributed flags)
from ddtree_jax import stop_strings

FLAGS = flags.FLAGS
flags.DEFINE_string("model_dir", None, "HF or converted target directory (default: the embedded model)")
flags.DEFINE_string("drafter_dir", None, "HF or converted DFlash drafter directory")
flags.DEFINE_string("prompt", None, "a text prompt")
flags.DEFINE_string("prompt_file", None, 'JSONL file, one {"prompt": ...} per line; optional per prompt: "stop" (a '
                    'string or a list: stop strings besides --stop), "max_new_tokens" (instead of --max_new_tokens)')
flags.DEFINE_string("prompt_ids", None, "comma-separated token ids (works without a tokenizer)")
flags.DEFINE_enum("mode", "ddtree", ["ar", "dflash", "ddtree"], "decoding mode")
flags.DEFINE_string("budget", "32", "DDTree node budget N (>= 1), or 'auto': the budget that maximises "
                    "expected tokens/s among 8..128 (ddtree_jax/spec/auto_budget.py)")
flags.DEFINE_float("temperature", 0.0, "0 = greedy")
flags.DEFINE_float("top_p", 1.0, "nucleus sampling, in (0, 1]")
flags.DEFINE_integer("top_k", 0, "top-k sampling (0 = off)")
flags.DEFINE_integer("max_new_tokens", 64, "tokens to generate per prompt")
flags.DEFINE_multi_string("stop", [], "stop string (repeat the flag for several): a request ends once its text "
                          "contains one; its text ends before it, its tokens with the one that completes it")
flags.DEFINE_string("stop_ids", None, "comma-separated token ids that end a request, besides the model's own "
                    "end tokens (config.json eos_token_id); the stop token is kept")
flags.DEFINE_integer("batch_size", 0, "prompts generated together (0: all in one batch); more prompts run batch "
                     "after batch, batch k with sampling seed --seed + k", lower_bound=0)
flags.DEFINE_boolean("logprobs", False, "write each generated token's log-probability under the target (before "
                     "temperature / top-k / top-p) to --output_json as \"logprobs\"")
flags.DEFINE_integer("seed", 0, "sampling seed, in [0, 2**32) (jax.random.key keeps 32 bits)", lower_bound=0,
                     upper_bound=2**32 - 1)
flags.DEFINE_string("dtype", "bfloat16", "parameter and cache dtype: bfloat16 or float32")
flags.DEFINE_string("output_json", None, "write results here")
flags.DEFINE_boolean("chat", False, "wrap text prompts in the model's chat turn format (Kimi tokenizers)")
flags.DEFINE_boolean("stream", True, "print text as it is generated (single prompt)")
flags.DEFINE_boolean("interactive", False, "keep the models loaded and read prompts from stdin, one line a turn "
                     "(--chat: a conversation, each turn's prompt holds the earlier turns); /reset forgets the "
                     "conversation, /exit or the end of input stops")
flags.DEFINE_string("trace_dir", None, "save every round's draft tree (PNG) and accepted path (JSON) here "
                    "(dflash/ddtree; slower, same tokens)")


@dataclasses.dataclass
class Prompts:
  ids: list                        # [n] token-id lists (None until encode_prompts, for text prompts)
  texts: list                      # [n] prompt texts, None for --prompt_ids
  names: list                      # [n] how errors name each prompt: "--prompt", "--prompt_ids" or "FILE:LINE"
  stops: list                      # [n] each prompt's own stop strings (--prompt_file "stop"), tuples
  max_new: list                    # [n] each prompt's own max_new_tokens (--prompt_file), None: --max_new_tokens
  notes: list = dataclasses.field(default_factory=list)   # what to tell the user once (fields ignored)


PROMPT_FILE_FIELDS = ("prompt", "stop", "max_new_tokens")


def _prompt_file_line(record, where: str):
  """(text, own stop strings, own max_new_tokens or None, ignored field names) of one --prompt_file record."""
  from ddtree_jax.cli.common import UsageError
  if not isinstance(record, dict) or not isinstance(record.get("prompt"), str):
    raise UsageError(f"{where}: expected a JSON object with a \"prompt\" string")
  try:
    stops = stop_strings.normalize(record.get("stop"), what=f"{where}: \"stop\"")
  except ValueError as e:
    raise UsageError(str(e)) from None
  max_new = record.get("max_new_tokens")
  if max_new is not None and (isinstance(max_new, bool) or not isinstance(max_new, int) or max_new < 1):
    raise UsageError(f"{where}: \"max_new_tokens\" must be an integer >= 1, got {max_new!r}")
  return record["prompt"], stops, max_new, set(record) - set(PROMPT_FILE_FIELDS)


def read_prompts() -> Prompts:
  """The prompts and their options from the flags, checked before any model is loaded (text not yet encoded)."""
  from ddtree_jax.cli.common import UsageError
  given = [f for f in ("prompt", "prompt_file", "prompt_ids") if getattr(FLAGS, f) is not None]
  if len(given) > 1:
    raise UsageError("give only one of --prompt, --prompt_file, --prompt_ids (got "
                     f"{', '.join('--' + g for g in given)})")
  if FLAGS.prompt_ids is not None:
    try:
      ids = [int(x) for x in FLAGS.prompt_ids.split(",") if x.strip()]
    except ValueError:
      raise UsageError(f"--prompt_ids={FLAGS.prompt_ids!r}: expected comma-separated integers") from None
    return Prompts([ids], [None], ["--prompt_ids"], [()], [None])
  if FLAGS.prompt_file is None:
    text = FLAGS.prompt if FLAGS.prompt is not None else "def fibonacci(n):\n"
    return Prompts([None], [text], ["--prompt"], [()], [None])
  if not os.path.exists(FLAGS.prompt_file):
    raise UsageError(f"--prompt_file={FLAGS.prompt_file}: no such file")
  lines, names, ignored = [], [], set()
  with open(FLAGS.prompt_file) as f:
    for n, line in enumerate(f, 1):
      if not line.strip():
        continue
      where = f"{FLAGS.prompt_file}:{n}"
      try:
        record = json.loads(line)
      except json.JSONDecodeError as e:
        raise UsageError(f"{where}: not valid JSON ({e.msg} at column {e.colno}); expected an object with a "
                         "\"prompt\" string") from None
      *parts, unknown = _prompt_file_line(record, where)
      lines.append(parts)
      names.append(where)
      ignored |= unknown
  if not lines:
    raise UsageError(f"--prompt_file={FLAGS.prompt_file}: no prompts in the file")
  texts, stops, max_new = (list(c) for c in zip(*lines))
  # Other fields stay in the file for the user's own use (ids, references); named once, in case of a misspelling.
  notes = [f"{FLAGS.prompt_file}: ignoring field(s) {', '.join(sorted(ignored))} "
           f"(read: {', '.join(PROMPT_FILE_FIELDS)})"] if ignored else []
  return Prompts([None] * len(texts), texts, names, stops, max_new, notes)


def encode_prompts(prompts: Prompts, tokenizer) -> Prompts:
  """Text prompts encoded with the model's tokenizer (--chat: in its chat turn format)."""
  from ddtree_jax.cli.common import UsageError
  if all(ids is not None for ids in prompts.ids):
    return prompts
  if tokenizer is None:
    raise UsageError("this model directory has no tokenizer: pass --prompt_ids=1,2,3")
  encode = tokenizer.encode_chat if FLAGS.chat else tokenizer.encode
  return dataclasses.replace(prompts, ids=[encode(t) for t in prompts.texts])


def parse_stop_ids():
  """--stop_ids as a list of ints (None when not given); the vocabulary check waits for the model's config."""
  from ddtree_jax.cli.common import UsageError
  if FLAGS.stop_ids is None:
    return None
  try:
    return [int(x) for x in FLAGS.stop_ids.split(",") if x.strip()]
  except ValueError:
    raise UsageError(f"--stop_ids={FLAGS.stop_ids!r}: expected comma-separated integers") from None


def stop_ids_for(cfg, extra):
  """The model's own stop ids plus --stop_ids (None: the engine's default, the model's own)."""
  from ddtree_jax.cli.common import UsageError
  if extra is None:
    return None
  bad = [t for t in extra if not 0 <= t < cfg.vocab_size]
  if bad:
    raise UsageError(f"--stop_ids: token id {bad[0]} is outside the vocabulary [0, {cfg.vocab_size})")
  return list(cfg.stop_token_ids) + extra


def main(argv):
  del argv
  from ddtree_jax.cli.common import (UsageError, check_drafter_config, load_models, parse_budget, parse_dtype,
                                     parse_prefill_chunk, target_config_and_tokenizer)
  from ddtree_jax.engine import Engine, check_requests
  from ddtree_jax.sampling import SamplingParams
  try:
    if FLAGS.interactive:
      clash = [f"--{f}" for f in ("prompt", "prompt_file", "prompt_ids", "output_json", "trace_dir", "batch_size",
                                  "logprobs") if getattr(FLAGS, f) not in (None, False, 0)]
      clash += [] if FLAGS.stream else ["--nostream"]
      if clash:
        raise UsageError(f"--interactive reads its prompts from stdin and streams the replies: drop {', '.join(clash)}")
    budget = parse_budget(FLAGS.budget)
    prefill_chunk = parse_prefill_chunk(FLAGS.prefill_chunk)
    if FLAGS.max_new_tokens < 1:
      raise UsageError(f"--max_new_tokens={FLAGS.max_new_tokens}: must be >= 1")
    if FLAGS.trace_dir and FLAGS.mode == "ar":
      raise UsageError("--trace_dir: mode ar has no draft tree (use --mode=dflash or --mode=ddtree)")
    if FLAGS.logprobs and not FLAGS.output_json:
      raise UsageError("--logprobs: the log-probabilities are written to --output_json; give it too")
    try:
      sampling = SamplingParams(FLAGS.temperature, FLAGS.top_p, FLAGS.top_k).validate()
    except ValueError as e:
      raise UsageError(f"--{str(e).split()[0]}: {e}") from None
    dtype = parse_dtype(FLAGS.dtype)
    # Everything about the requests is checked before any weight is read (a K2.6 load takes minutes): the flags,
    # the prompt file, then the prompts and stops against the target's config and tokenizer.
    given_prompts = Prompts([], [], [], [], []) if FLAGS.interactive else read_prompts()   # (stdin: read later)
    extra_stop_ids = parse_stop_ids()
    try:
      given = stop_strings.normalize(FLAGS.stop, what="--stop")
    except ValueError as e:
      raise UsageError(str(e)) from None
    cfg, tok = target_config_and_tokenizer(FLAGS.model_dir)
    if FLAGS.mode != "ar":
      check_drafter_config(FLAGS.model_dir, FLAGS.drafter_dir, cfg, FLAGS.mode)
    if tok is None and given:
      raise UsageError("--stop needs the model's tokenizer (this model directory has none): use --stop_ids")
    stop_ids = stop_ids_for(cfg, extra_stop_ids)
    if FLAGS.interactive and tok is None:
      raise UsageError("--interactive needs the model's tokenizer (this model directory has none)")
    given_prompts = encode_prompts(given_prompts, tok)
    prompts, texts = given_prompts.ids, given_prompts.texts
    max_new = [FLAGS.max_new_tokens if m is None else m for m in given_prompts.max_new]
    if not FLAGS.interactive:
      check_requests(cfg, prompts, max_new, names=given_prompts.names)
    size = FLAGS.batch_size or len(prompts) or 1
    batches = [list(range(a, min(a + size, len(prompts)))) for a in range(0, len(prompts), size)]
    # each batch's stop strings (StopStrings counts requests within its generate call)
    batch_stops = [None if tok is None else
                   stop_strings.StopStrings(tok.decode, [given + given_prompts.stops[i] for i in batch])
                   for batch in batches]
    distributed.initialize()
    mesh = distributed.mesh_from_flags()
    target, cfg, drafter, dcfg, tok, label = load_models(FLAGS.model_dir, FLAGS.drafter_dir, dtype,
                                                         want_drafter=FLAGS.mode != "ar", mesh=mesh)
    engine = Engine(target, cfg, drafter, dcfg, mesh=mesh, prefill_chunk=prefill_chunk, moe_layout=FLAGS.moe_layout)
  except (UsageError, ValueError) as e:
    print(f"ddtree-generate: error: {e}", file=sys.stderr)
    return 2
  from ddtree_jax import processes
  # Several processes (one per host) run the same generation; process 0 alone prints it and writes the files.
  primary = processes.is_primary()
  say = (lambda text: print(text, file=sys.stderr, flush=True)) if primary else (lambda text: None)
  for note in given_prompts.notes:
    say(f"ddtree-generate: {note}")
  say(f"model: {label}\nmode: {FLAGS.mode}" + (f" (budget {FLAGS.budget})" if FLAGS.mode == "ddtree" else "")
      + f"\ndevices: {distributed.describe(mesh)}")
  if FLAGS.interactive:
    return interactive(engine, cfg, tok, budget, sampling, stop_ids, given, primary, say)
  from ddtree_jax.cli.text_stream import TextStream
  stream = printer = None
  if FLAGS.stream and len(prompts) == 1 and tok is not None:
    # Every process streams (the engine's read of the tokens may be a collective), only process 0 writes.
    write = stdout_writer(primary)
    printer = TextStream(tok.decode, write, batch_stops[0])
    stream = lambda i, ids: printer.add(ids)   # noqa: E731
    if texts[0] is not None:
      write(texts[0])
  import contextlib
  from ddtree_jax.viz import trace as viz_trace
  results = []   # (the batch's StopStrings, index in the batch, GenerationResult) per prompt, in order
  try:
    with (viz_trace.tracing(engine) if FLAGS.trace_dir else contextlib.nullcontext([])) as traces:
      for k, (batch, stops) in enumerate(zip(batches, batch_stops)):
        if len(batches) > 1:
          say(f"batch {k + 1}/{len(batches)}: prompts {batch[0]}-{batch[-1]}")
        traced = len(traces)
        got = engine.generate([prompts[i] for i in batch], mode=FLAGS.mode, budget=budget, sampling=sampling,
                              max_new_tokens=[max_new[i] for i in batch], seed=(FLAGS.seed + k) % 2**32,
                              stream=stream, rounds_per_call=FLAGS.rounds_per_call, stop_ids=stop_ids,
                              stop_when=stops.tokens_to_keep if stops is not None and stops.any else None,
                              logprobs=FLAGS.logprobs)
        for t in traces[traced:]:          # a trace's sequence: the prompt's index in the run, not in its batch
          t.sequence += batch[0]
        results += [(stops, j, r) for j, r in enumerate(got)]
  except ValueError as e:
    print(f"ddtree-generate: error: {e}", file=sys.stderr)
    return 2
  auto = getattr(engine, "last_auto", None) if budget == "auto" and FLAGS.mode == "ddtree" else None
  if auto is not None:
    say(f"auto budget: rounds per budget {auto['rounds_per_budget']}, last choice {auto['chosen']}"
        + (" (last batch)" if len(batches) > 1 else ""))
  records = []
  for i, (stops, j, r) in enumerate(results):
    rec = {"prompt": texts[i], "prompt_ids": prompts[i], "token_ids": r.token_ids, "stats": r.stats()}
    if r.logprobs is not None:
      rec["logprobs"] = r.logprobs
    if tok is not None:
      rec["text"] = r.text = stops.cut(j, tok.decode(r.token_ids))
    records.append(rec)
    if not primary:
      continue
    if printer is not None:
      printer.finish(r.text)
    else:
      print(rec.get("text", r.token_ids))
    s = r.stats()
    say(f"\n[{i}] {len(r.token_ids)} tokens in {s['rounds']} rounds, tau {s['tau']:.2f} tokens/round, "
        f"{s['tokens_per_s']:.1f} tokens/s (prefill {s['prefill_s'] * 1e3:.0f} ms, then "
        f"{s['decode_tokens_per_s']:.1f} tokens/s; {s['stop_reason']})")
  if FLAGS.trace_dir and primary:
    viz_trace.save_traces(traces, FLAGS.trace_dir, tok)
    say(f"trace: {len(traces)} round trees (PNG + JSON) in {FLAGS.trace_dir}")
  if FLAGS.output_json and primary:
    tmp = FLAGS.output_json + ".tmp"
    with open(tmp, "w") as f:
      json.dump({"model": label, "mode": FLAGS.mode, "budget": budget, "results": records,
                 **({"auto_budget": auto} if auto is not None else {})}, f, indent=1)
    os.replace(tmp, FLAGS.output_json)
  return 0


def stdout_writer(primary: bool):
  """write(text) to stdout at once on process 0; nothing on the other processes (which run the same code)."""
  def write(text):
    if primary:
      sys.stdout.write(text)
      sys.stdout.flush()
  return write


def interactive(engine, cfg, tok, budget, sampling, stop_ids, stops, primary, say) -> int:
  """--interactive: turns read by process 0 from stdin (and handed to the other processes), each streamed on
  process 0's stdout. A turn that cannot run (too long for the model's window, ...) is refused with its reason and
  the session goes on."""
  from ddtree_jax import processes
  from ddtree_jax.cli.conversation import Conversation
  from ddtree_jax.cli.text_stream import TextStream
  from ddtree_jax.engine import check_requests

  write = stdout_writer(primary)
  # The reply without the end token that closes it (its text, e.g. "<|im_end|>", is not shown, and the chat format
  # adds its own when the reply goes into the next prompt).
  end_ids = set(stop_ids if stop_ids is not None else cfg.stop_token_ids)
  conversation = Conversation(FLAGS.chat)
  say("interactive: one prompt a line" + (" (a conversation)" if FLAGS.chat else "")
      + "; /reset forgets the conversation, /exit or the end of input stops, // starts a prompt with /")
  turn = 0
  while True:
    line = None
    if primary:   # nothing here may raise: the other processes wait for this line in a collective
      try:
        sys.stderr.write("> ")
        sys.stderr.flush()
        raw = sys.stdin.buffer.readline()          # bytes: a line that is not UTF-8 is decoded with U+FFFD
        line = raw.decode("utf-8", "replace").rstrip("\r\n") if raw else None
      except (KeyboardInterrupt, OSError):
        line = None                                # Ctrl-C or a closed stdin: the end of input on every process
    line = processes.text_from_process_0(line)
    if line is None:
      break
    try:
      command = conversation.command(line)
    except ValueError as e:
      say(f"ddtree-generate: {e}")
      continue
    if command == "/exit":
      break
    if command == "/reset":
      say("(conversation forgotten)")
      continue
    if not line.strip():
      continue
    line = conversation.prompt_text(line)
    stop = stop_strings.StopStrings(tok.decode, [stops])
    printer = TextStream(tok.decode, write, stop)
    try:
      ids = conversation.prompt_ids(line, tok)
      check_requests(cfg, [ids], FLAGS.max_new_tokens, names=["this turn's prompt"])
      r = engine.generate([ids], mode=FLAGS.mode, budget=budget, sampling=sampling,
                          max_new_tokens=FLAGS.max_new_tokens, seed=(FLAGS.seed + turn) % 2**32,
                          stream=lambda i, new: printer.add([t for t in new if t not in end_ids]),
                          rounds_per_call=FLAGS.rounds_per_call, stop_ids=stop_ids,
                          stop_when=stop.tokens_to_keep if stop.any else None)[0]
    except ValueError as e:
      say(f"ddtree-generate: {e}" + (" (/reset starts a new conversation)" if FLAGS.chat else ""))
      continue
    closed = r.stop_reason == "stop_token"
    reply = stop.cut(0, tok.decode(r.token_ids[:-1] if closed else r.token_ids))
    printer.finish(reply)
    write("\n")
    conversation.record(line, reply)
    s = r.stats()
    say(f"[{len(r.token_ids)} tokens in {s['rounds']} rounds after a {len(ids)}-token prompt, tau {s['tau']:.2f}, "
        f"{s['tokens_per_s']:.1f} tokens/s; {s['stop_reason']}]")
    turn += 1
  return 0


def run():
  app.run(lambda argv: sys.exit(main(argv)))


if __name__ == "__main__":
  run()
