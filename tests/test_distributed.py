"""Several hosts: two local processes with 4 virtual CPU devices each, joined by jax.distributed on the
loopback address (the CLIs' start-up: cli/distributed.py flags, `--mesh=1x8`: the model axis spans both
processes), generate with ar, dflash and ddtree (budget 4) on the embedded default model, and produce the
tokens of one process on one device. One pair of processes runs all three modes (this file is the worker)."""
import json
import os
import socket
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPT = "def fibonacci(n):\n"     # the speculative rounds accept 1 to 3 tokens on it (not only rejections)
MODES = (("ar", 1), ("dflash", 1), ("ddtree", 4))     # (mode, budget): dflash ignores the budget
MAX_NEW = 12


def _free_port() -> int:
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _env(devices: int):
  return dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
              XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")


def _cmd(out, *flag_args):
  return [sys.executable, os.path.abspath(__file__), str(out), *flag_args]


def test_two_processes_match_one_process(tmp_path):
  port = _free_port()
  procs = [subprocess.Popen(_cmd(tmp_path / f"p{i}.json", "--mesh=1x8", f"--coordinator_address=127.0.0.1:{port}",
                                 "--num_processes=2", f"--process_id={i}"),
                            env=_env(4), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
           for i in range(2)]
  one = subprocess.run(_cmd(tmp_path / "one.json"), env=_env(1), capture_output=True, text=True, timeout=900, cwd=ROOT)
  outs = []
  for p in procs:
    try:
      outs.append(p.communicate(timeout=900))
    except subprocess.TimeoutExpired:
      for q in procs:
        q.kill()
      raise
  for p, (o, e) in zip(procs, outs):
    assert p.returncode == 0, o[-2000:] + e[-4000:]
  assert one.returncode == 0, one.stdout[-2000:] + one.stderr[-4000:]
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
