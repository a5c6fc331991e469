"""ddtree-generate end to end on small checkpoints in the real layout, and its refusals."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from configs.tiny import tiny, tiny_drafter
from ddtree_jax.checkpoint.synthetic import write_drafter_checkpoint, write_target_checkpoint
from tests.generate_cli import ROOT, run_generate as run_cli


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
  base = tmp_path_factory.mktemp("ckpt")
  cfg = tiny(stop_token_ids=())
  target = write_target_checkpoint(str(base / "target"), cfg, layout="k26", n_shards=2)
  drafter = write_drafter_checkpoint(str(base / "drafter"), tiny_drafter(cfg, block_size=4))
  bad = write_drafter_checkpoint(str(base / "bad_drafter"),
                                 tiny_drafter(tiny(vocab_size=512), block_size=4))
  return target, drafter, bad


def test_generate_json_all_modes_agree(dirs, tmp_path):
  target, drafter, _ = dirs
  outs = {}
  for mode in ("ar", "dflash", "ddtree"):
    out = tmp_path / f"{mode}.json"
    r = run_cli(f"--model_dir={target}", f"--drafter_dir={drafter}", "--prompt_ids=5,6,7,8", f"--mode={mode}",
                "--budget=6", "--max_new_tokens=10", "--dtype=float32", f"--output_json={out}", "--logprobs")
    assert r.returncode == 0, r.stderr[-2000:]
    rec = json.loads(out.read_text())["results"][0]
    assert len(rec["token_ids"]) == 10 and len(rec["logprobs"]) == 10 and all(lp < 0 for lp in rec["logprobs"])
    assert set(rec["stats"]) >= {"rounds", "accepted_per_round", "tau", "tokens_per_s"}
    assert sum(rec["stats"]["accepted_per_round"]) + 1 == 10   # the first token comes from the prefill
    outs[mode] = rec
  assert outs["ar"]["token_ids"] == outs["dflash"]["token_ids"] == outs["ddtree"]["token_ids"]
  for mode in ("dflash", "ddtree"):
    assert outs[mode]["logprobs"] == pytest.approx(outs["ar"]["logprobs"], abs=1e-5)


BAD_FLAGS = [
    ("--budget=0", "--budget=0: must be >= 1"),
    ("--temperature=-0.5", "temperature must be >= 0"),
    ("--top_p=1.5", "top_p must be in (0, 1]"),
    ("--top_p=0", "top_p must be in (0, 1]"),
    ("--max_new_tokens=0", "--max_new_tokens=0"),
    ("--dtype=int8", "--dtype='int8'"),
    ("--prompt_ids=1,x", "--prompt_ids='1,x'"),
    ("--prefill_chunk=-1", "--prefill_chunk=-1: must be >= 0"),
    ("--moe_layout=k_chunks", "moe_layout 'k_chunks' needs INT4 experts with hidden_size (64)"),
    ("--rounds_per_call=0", "--rounds_per_call"),
    ("--seed=4294967296", "--seed=4294967296"),
    ("--budget=auto --rounds_per_call=2", "rounds_per_call=2: budget 'auto'"),
    ("--stop=", "--stop: a stop string must not be empty"),
    ("--stop=abc", "--stop needs the model's tokenizer"),
    ("--stop_ids=256", "--stop_ids: token id 256 is outside the vocabulary [0, 256)"),
    ("--stop_ids=1,x", "--stop_ids='1,x'"),
    ("--batch_size=-1", "--batch_size"),
    ("--logprobs", "--logprobs: the log-probabilities are written to --output_json"),
    ("--interactive", "--interactive reads its prompts from stdin and streams the replies: drop --prompt_ids"),
]


def test_bad_flags_exit_nonzero_with_message(refusals):
  """Each refused with a message naming the flag or value (base: the tiny target and drafter, --prompt_ids=1,2)."""
  wrong = {flag: refusals[flag]["stderr"][-500:] for flag, message in BAD_FLAGS
           if refusals[flag]["rc"] == 0 or message not in refusals[flag]["stderr"]}
  assert not wrong, wrong


def test_drafter_that_does_not_fit_is_refused(refusals):
  r = refusals["drafter vocabulary"]
  assert r["rc"] != 0 and "vocab_size" in r["stderr"] and "does not match" in r["stderr"], r["stderr"][-1500:]
  assert not r["loaded"]                          # refused before any weight was read
  assert refusals["--moe_layout=k_chunks"]["loaded"]   # (a refusal that needs the loaded model: the flag works)


def test_refused_before_the_weights_or_other_checks(refusals):
  r = refusals["no drafter"]
  assert r["rc"] != 0 and "--mode=dflash needs a drafter: pass --drafter_dir" in r["stderr"], r["stderr"][-1500:]
  assert not r["loaded"]
  r = refusals["interactive order"]
  assert r["rc"] != 0 and "drop --trace_dir, --logprobs, --nostream" in r["stderr"], r["stderr"][-1500:]


def test_missing_dirs_and_tokenizerless_text_prompt(refusals):
  assert refusals["missing dir"]["rc"] != 0 and "no such directory" in refusals["missing dir"]["stderr"]
  assert refusals["no tokenizer"]["rc"] != 0 and "no tokenizer" in refusals["no tokenizer"]["stderr"]


@pytest.fixture(scope="module")
def text_target(dirs, tmp_path_factory):
  """The tiny target with the embedded model's byte-level BPE tokenizer (its first 256 ids decode to bytes and
  specials, so the random model's output is text, not always valid UTF-8)."""
  target = str(tmp_path_factory.mktemp("text") / "target")
  shutil.copytree(dirs[0], target)
  shutil.copy(os.path.join(ROOT, "checkpoints", "default", "target", "tokenizer.json"), target)
  return target


# Refusals: every case runs in one process (refusals_driver below), not one process each (~3 s of start-up each).
# The JSONL cases run with a model directory that does not exist: they are refused before any model is read.
JSONL_REFUSALS = {
    "jsonl stop": ('{"prompt": "a"}\n{"prompt": "b", "stop": 5}\n',
                   '2: "stop": expected a string or a list of strings'),
    "jsonl max_new": ('{"prompt": "Q"}\n{"prompt": "Q", "max_new_tokens": 0}\n',
                      '2: "max_new_tokens" must be an integer >= 1, got 0'),
    "jsonl not an object": ('{"prompt": "Q"}\n["Q"]\n', '2: expected a JSON object with a "prompt" string'),
    "jsonl syntax": ('{"prompt": "Q"}\n{"prompt": "Q",}\n',
                     "2: not valid JSON (Expecting property name enclosed in double quotes at column 16)"),
}


@pytest.fixture(scope="module")
def refusals(dirs, text_target, tmp_path_factory):
  """{case: {"rc", "stderr"}} of ddtree-generate's main() on each refused command line."""
  target, drafter, bad = dirs
  base = tmp_path_factory.mktemp("refusals")
  cases = {flag: [f"--model_dir={target}", f"--drafter_dir={drafter}", "--prompt_ids=1,2", *flag.split(" ")]
           for flag, _ in BAD_FLAGS}
  cases["drafter vocabulary"] = [f"--model_dir={target}", f"--drafter_dir={bad}", "--prompt_ids=1,2", "--mode=ddtree"]
  cases["missing dir"] = [f"--model_dir={base / 'nope'}", "--prompt_ids=1"]
  cases["no drafter"] = [f"--model_dir={text_target}", "--prompt_ids=1,2", "--mode=dflash"]
  cases["interactive order"] = [f"--model_dir={target}", "--interactive", "--logprobs", "--nostream", "--mode=ar",
                                "--trace_dir=x"]
  cases["no tokenizer"] = [f"--model_dir={target}", "--mode=ar", "--prompt=hello"]
  for name, (text, _) in JSONL_REFUSALS.items():
    path = base / (name.replace(" ", "_") + ".jsonl")
    path.write_text(text)
    cases[name] = [f"--model_dir={base / 'absent'}", "--mode=ar", f"--prompt_file={path}"]
  # checked against the model's window before the first batch runs, named by its line
  window = base / "window.jsonl"
  window.write_text('{"prompt": "Q"}\n{"prompt": "@"}\n{"prompt": "~", "max_new_tokens": 600}\n')
  cases["jsonl window"] = [f"--model_dir={text_target}", "--mode=ar", f"--prompt_file={window}", "--batch_size=1"]
  (base / "cases.json").write_text(json.dumps(cases))
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
  r = subprocess.run([sys.executable, __file__, str(base / "cases.json")], capture_output=True, text=True, env=env,
                     cwd=ROOT, timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  results = json.loads([l for l in r.stdout.splitlines() if l.startswith("RESULT ")][-1][len("RESULT "):])
  results["jsonl paths"] = {name: str(base / (name.replace(" ", "_") + ".jsonl")) for name in JSONL_REFUSALS}
  results["window path"] = str(window)
  return results


def test_prompt_file_refusals_name_the_line(refusals):
  for name, (_, message) in JSONL_REFUSALS.items():
    r = refusals[name]
    assert r["rc"] != 0 and f"{refusals['jsonl paths'][name]}:{message}" in r["stderr"], (name, r["stderr"][-1500:])
    assert not r["loaded"], name
  r = refusals["jsonl window"]
  assert r["rc"] != 0 and not r["loaded"], r["stderr"][-1500:]
  assert f"{refusals['window path']}:3: 1 prompt tokens + max_new_tokens 600 exceed the model's window" in r["stderr"]


def refusals_driver(cases_path):
  """Runs main() on each case's flags in this one process: {case: {"rc", "stderr", "loaded"}} as a RESULT line
  (loaded: whether main() got as far as loading the models). A flag value absl itself refuses counts as rc 1 with
  absl's message (app.run exits non-zero with it)."""
  import contextlib
  import io
  from absl import flags
  from ddtree_jax.cli import common, generate
  loads = []
  load_models = common.load_models
  common.load_models = lambda *a, **k: (loads.append(1), load_models(*a, **k))[1]
  out = {}
  for name, argv in json.loads(open(cases_path).read()).items():
    err = io.StringIO()
    loads.clear()
    generate.FLAGS.unparse_flags()
    with contextlib.redirect_stderr(err):
      try:
        generate.FLAGS(["ddtree-generate", *argv])
        rc = generate.main(None)
      except flags.Error as e:
        rc = 1
        print(f"FATAL Flags parsing error: {e}", file=sys.stderr)
    out[name] = {"rc": rc, "stderr": err.getvalue(), "loaded": bool(loads)}
  print("RESULT " + json.dumps(out))


@pytest.mark.e2e
def test_stop_strings_and_stop_ids(dirs, text_target, tmp_path):
  from ddtree_jax.checkpoint.tokenizer import load_tokenizer
  decode = load_tokenizer(text_target).decode
  base = (f"--model_dir={text_target}", f"--drafter_dir={dirs[1]}", "--prompt_ids=5,6,7,8", "--mode=ddtree",
          "--budget=6", "--max_new_tokens=40", "--dtype=float32")

  def generate(*flags):
    out = tmp_path / "out.json"
    r = run_cli(*base, f"--output_json={out}", *flags)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(out.read_text())["results"][0], r.stdout

  full, stdout = generate()
  assert full["text"] == decode(full["token_ids"]) == stdout      # the stream prints exactly the final text
  text, ids = full["text"], full["token_ids"]
  # A stop string from the second half of the output (no replacement character in it).
  at = next(k for k in range(len(text) // 2, len(text) - 2) if "\ufffd" not in text[k:k + 2])
  stop = text[at:at + 2]
  kept = next(n for n in range(1, len(ids) + 1) if stop in decode(ids[:n]))
  got, stdout = generate(f"--stop={stop}")
  assert got["token_ids"] == ids[:kept] and got["stats"]["stop_reason"] == "stop_string"
  assert got["text"] == stdout == text[:text.index(stop)]
  # --stop_ids: the first occurrence of the token ends the request, the token kept.
  stop_id = ids[len(ids) // 2]
  got, _ = generate(f"--stop_ids={stop_id}", "--nostream")
  assert got["token_ids"] == ids[:ids.index(stop_id) + 1] and got["stats"]["stop_reason"] == "stop_token"


@pytest.mark.e2e
def test_prompt_file_options_per_prompt(dirs, text_target, tmp_path):
  # "Q" and "@" are single tokens below the tiny vocabulary in the embedded tokenizer.
  prompts = tmp_path / "p.jsonl"
  prompts.write_text('{"prompt": "Q", "max_new_tokens": 5, "id": 7}\n\n{"prompt": "@"}\n{"prompt": "~"}\n')
  runs = []
  for batch_size in (0, 2):          # all three in one batch; two batches (2 + 1), traced
    out = tmp_path / f"out{batch_size}.json"
    traces = [f"--trace_dir={tmp_path / 'trees'}"] if batch_size else []
    r = run_cli(f"--model_dir={text_target}", f"--drafter_dir={dirs[1]}", f"--prompt_file={prompts}", "--budget=6",
                "--max_new_tokens=12", "--dtype=float32", f"--output_json={out}", f"--batch_size={batch_size}",
                *traces)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stderr.count(f"{prompts}: ignoring field(s) id (read: prompt, stop, max_new_tokens)") == 1
    runs.append(json.loads(out.read_text())["results"])
    assert ("batch 2/2: prompts 2-2" in r.stderr) == (batch_size == 2), r.stderr[-1500:]
  got = runs[0]
  assert [len(g["token_ids"]) for g in got] == [5, 12, 12] and [g["prompt"] for g in got] == ["Q", "@", "~"]
  assert [g["token_ids"] for g in runs[1]] == [g["token_ids"] for g in got]     # greedy: batches change nothing
  # --interactive: the same replies a line at a time (greedy: the first 5 tokens of the 12 above for "@"); a
  # command it does not know and a turn the model cannot take ("ab" is token 404, outside the tiny vocabulary) are
  # refused with their reason and the session goes on
  from ddtree_jax.checkpoint.tokenizer import load_tokenizer
  decode = load_tokenizer(text_target).decode
  chat = run_cli(f"--model_dir={text_target}", f"--drafter_dir={dirs[1]}", "--interactive", "--budget=6",
                 "--max_new_tokens=5", "--dtype=float32", stdin="Q\n/bogus\nab\n/reset\n@\n")
  assert chat.returncode == 0, chat.stderr[-2000:]
  assert chat.stdout == decode(got[0]["token_ids"]) + "\n" + decode(got[1]["token_ids"][:5]) + "\n", chat.stdout
  assert "unknown command '/bogus'" in chat.stderr
  assert "this turn's prompt: token id 404 is outside the vocabulary [0, 256)" in chat.stderr
  # one trace file per round of every prompt (the second batch's are not written over the first's)
  rounds = sum(g["stats"]["rounds"] for g in runs[1])
  assert f"trace: {rounds} round trees" in r.stderr and len(list((tmp_path / "trees").glob("*.json"))) == rounds


if __name__ == "__main__":
  refusals_driver(sys.argv[1])
