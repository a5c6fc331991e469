"""Several hosts: two local processes with 4 virtual CPU devices each, joined by jax.distributed on the
loopback address (the CLIs' start-up: cli/distributed.py flags, `--mesh=1x8`: the model axis spans both
processes), generate with ar and ddtree (budget 4) on the embedded default model, and produce the tokens of one
process on one device. One pair of processes runs both modes (this file is the worker). DFlash's chain is the
round's other tree shape: its tokens on a mesh of 8 devices are checked against one device in test_sharding.py
(one process), so it is left out here, where every mode costs three processes' compilations.
And `ddtree-convert --mesh=1x8` over two processes writes the checkpoint that one process reads back exactly."""
import concurrent.futures
import json
import os
import re
import shutil
import socket
import subprocess
import sys

import pytest

# Every test here starts several processes, each compiling its own programs: the end-to-end tier (`make test-e2e`).
pytestmark = pytest.mark.e2e

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPT = "def fibonacci(n):\n"     # the speculative rounds accept 1 to 3 tokens on it (not only rejections)
MODES = (("ar", 1), ("ddtree", 4))     # (mode, budget)
MAX_NEW = 12


def _free_port() -> int:
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _env(devices: int):
  return dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
              XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={devices}").strip())


def _cmd(out, *flag_args):
  return [sys.executable, os.path.abspath(__file__), str(out), *flag_args]


def _run_pair(cmd, timeout=900, stdin_0=None):
  """Runs cmd(i) + the jax.distributed flags as processes i = 0, 1 (4 CPU devices each), process 0 reading stdin_0;
  -> their (stdout, stderr)."""
  port = _free_port()
  procs = [subprocess.Popen([*cmd(i), f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2", f"--process_id={i}"],
                            env=_env(4), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            stdin=subprocess.PIPE if i == 0 and stdin_0 is not None else subprocess.DEVNULL)
           for i in range(2)]
  # Both pipes drained at once: a process that fills its pipe while the other is drained would block, and its
  # partner with it in their next collective.
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    pending = [pool.submit(p.communicate, input=stdin_0 if i == 0 else None, timeout=timeout)
               for i, p in enumerate(procs)]
    try:
      outs = [f.result() for f in pending]
    except subprocess.TimeoutExpired:
      for q in procs:
        q.kill()
      raise
  for p, (o, e) in zip(procs, outs):
    assert p.returncode == 0, o[-2000:] + e[-4000:]
  return outs


def test_two_processes_match_one_process(tmp_path):
  one = subprocess.Popen(_cmd(tmp_path / "one.json"), env=_env(1), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, cwd=ROOT)
  try:
    _run_pair(lambda i: _cmd(tmp_path / f"p{i}.json", "--mesh=1x8"))
    o, e = one.communicate(timeout=900)
  finally:
    if one.poll() is None:
      one.kill()
  assert one.returncode == 0, o[-2000:] + e[-4000:]
  ref = json.load(open(tmp_path / "one.json"))
  assert ref["devices"].startswith("1 device"), ref["devices"]
  for mode, _ in MODES:
    assert len(ref["tokens"][mode]) == MAX_NEW, (mode, ref["tokens"][mode])
    assert ref["tokens"][mode] == ref["tokens"]["ar"], f"one process: {mode} != ar ({ref['tokens']})"
  assert max(ref["accepted"]["ddtree"]) > 1, ref["accepted"]     # the tree walk accepted drafted tokens
  for i in range(2):
    got = json.load(open(tmp_path / f"p{i}.json"))
    assert "mesh 1x8" in got["devices"] and "2 process(es)" in got["devices"], got["devices"]
    for mode, _ in MODES:
      assert got["tokens"][mode] == ref["tokens"][mode], \
          f"process {i}, {mode}: {got['tokens'][mode]} != one process {ref['tokens'][mode]}"
      assert got["accepted"][mode] == ref["accepted"][mode], (i, mode, got["accepted"], ref["accepted"])


def test_two_processes_generate_cli(tmp_path):
  """ddtree-generate over two processes (--mesh=1x8): both run the generation, process 0 alone prints it and
  writes --output_json; stop strings (a host-side check on every process) and log-probabilities work across
  processes."""
  from configs.tiny import tiny_shardable
  from ddtree_jax.checkpoint import synthetic
  cfg = tiny_shardable(num_hidden_layers=2, stop_token_ids=())
  target = synthetic.write_target_checkpoint(str(tmp_path / "target"), cfg, layout="k26", n_shards=2)
  drafter = synthetic.write_drafter_checkpoint(str(tmp_path / "drafter"), synthetic.tiny_drafter_config(cfg))
  # The embedded model's byte-level tokenizer: its first 256 ids decode to bytes and specials (for --stop).
  shutil.copy(os.path.join(ROOT, "checkpoints", "default", "target", "tokenizer.json"), target)
  args = [sys.executable, "-m", "ddtree_jax.cli.generate", f"--model_dir={target}", f"--drafter_dir={drafter}",
          "--mode=ddtree", "--budget=4", "--max_new_tokens=10", "--dtype=float32", "--mesh=1x8"]
  # "Q" is one token (50) below the tiny vocabulary in this tokenizer
  outs = _run_pair(lambda i: args + ["--prompt=Q", "--logprobs", f"--output_json={tmp_path / 'out.json'}"])
  assert "mesh 1x8" in outs[0][1] and "2 process(es)" in outs[0][1], outs[0][1][-2000:]
  got = json.loads((tmp_path / "out.json").read_text())["results"][0]
  assert got["prompt_ids"] == [50]
  assert len(got["token_ids"]) == len(got["logprobs"]) == 10 and all(lp < 0 for lp in got["logprobs"])
  # streamed once, by process 0; the rest of stdout is the CPU collectives' log (whose threads interleave its lines)
  gloo = r"\[Gloo\]|Rank|is connected to|peer ranks\.|Expected number of connected peer ranks is :|\d+"
  assert got["text"] in outs[0][0] and got["text"] not in outs[1][0], outs
  assert re.sub(gloo, "", outs[1][0]).strip() == "", outs
  assert sorted(os.listdir(tmp_path)) == ["drafter", "out.json", "target"]        # no .tmp left behind
  # --interactive with a stop string: process 0 reads the lines and hands them to process 1 (a hang here would mean
  # it did not); the first turn is the prompt above, so it stops where that text holds the stop string
  text = got["text"]
  stop = next(text[k:k + 2] for k in range(len(text) // 2, len(text) - 1) if "\ufffd" not in text[k:k + 2])
  outs = _run_pair(lambda i: args + ["--interactive", f"--stop={stop}"], timeout=300, stdin_0="Q\n/reset\n@\n")
  assert outs[0][1].count("stop_string]") >= 1 and outs[0][1].count(" tokens in ") == 2, outs[0][1][-2000:]
  assert "conversation forgotten" in outs[0][1] and text[:text.index(stop)] + "\n" in outs[0][0], outs[0]
  assert " tokens in " not in outs[1][1] and re.sub(gloo, "", outs[1][0]).strip() == "", outs[1]
  assert text[:text.index(stop)] not in outs[1][0], outs[1]


def test_two_processes_convert(tmp_path):
  """ddtree-convert --mesh=1x8 over two processes (each saves its devices' slices, process 0 the files):
  the converted directory holds exactly the parameters of the HF checkpoint."""
  import jax.numpy as jnp
  import numpy as np
  from flax import nnx
  from configs.tiny import tiny_shardable
  from ddtree_jax.checkpoint import load_drafter, load_target, orbax_io, synthetic
  cfg = tiny_shardable(num_hidden_layers=2)
  hf = synthetic.write_target_checkpoint(str(tmp_path / "hf"), cfg, layout="k26", n_shards=2)
  dr = synthetic.write_drafter_checkpoint(str(tmp_path / "dr"), synthetic.tiny_drafter_config(cfg))
  out = tmp_path / "out"
  outs = _run_pair(lambda i: [sys.executable, "-m", "ddtree_jax.cli.convert", f"--hf_dir={hf}", f"--drafter_dir={dr}",
                              f"--out_dir={out}", "--dtype=float32", "--mesh=1x8", "--noprogress"])
  assert "mesh 1x8" in outs[0][1] and "2 process(es)" in outs[0][1], outs[0][1][-2000:]
  assert orbax_io.read_manifest(str(out))["mesh"] == {"data": 1, "model": 8}
  assert sorted(os.listdir(tmp_path)) == ["dr", "hf", "out"]         # no temporary directory left behind
  flat = lambda m: {".".join(map(str, k)): np.asarray(v.get_value()) for k, v in nnx.to_flat_state(nnx.state(m, nnx.Param))}
  got, want = flat(load_target(str(out), jnp.float32)[0]), flat(load_target(hf, jnp.float32)[0])
  assert got.keys() == want.keys() and all(np.array_equal(got[k], want[k]) for k in want), \
      [k for k in want if not np.array_equal(got.get(k), want[k])][:5]
  got, want = load_drafter(str(out), cfg, jnp.float32)[0], load_drafter(dr, cfg, jnp.float32)[0]
  assert got.keys() == want.keys() and all(np.array_equal(got[k], want[k]) for k in want)


def _worker(out_path: str, flag_args: list[str]) -> None:
  """What ddtree-generate does at start-up (jax.distributed from the flags, the mesh, the embedded model
  read into its shards), then every mode in one process; writes {"devices", "tokens": {mode: ids},
  "accepted": {mode: tokens per round}}."""
  from absl import flags
  from ddtree_jax.cli import distributed
  flags.FLAGS(["test_distributed", *flag_args])
  distributed.initialize()
  import jax.numpy as jnp
  from ddtree_jax.cli.common import load_models
  from ddtree_jax.engine import Engine
  mesh = distributed.mesh_from_flags()
  target, cfg, drafter, dcfg, tok, label = load_models(None, None, jnp.float32, want_drafter=True, mesh=mesh)
  assert "embedded default" in label, label
  engine = Engine(target, cfg, drafter, dcfg, mesh=mesh)
  out = {"devices": distributed.describe(mesh), "tokens": {}, "accepted": {}}
  for mode, budget in MODES:
    r = engine.generate([tok.encode(PROMPT)], mode=mode, budget=budget, max_new_tokens=MAX_NEW, stop_ids=())[0]
    out["tokens"][mode], out["accepted"][mode] = r.token_ids, r.accepted_per_round
  with open(out_path, "w") as f:
    json.dump(out, f)


if __name__ == "__main__":
  _worker(sys.argv[1], sys.argv[2:])
