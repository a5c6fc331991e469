"""Several hosts: two local processes with 4 virtual CPU devices each, joined by jax.distributed on the
loopback address, run `ddtree-generate --mesh=1x8` (the model axis spans both processes) and produce the
tokens of one process on one device."""
import json
import os
import socket
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARGS = ["--prompt_ids=5,17,33,2,90,41,7", "--mode=ar", "--max_new_tokens=8", "--nostream",
        "--dtype=float32"]


def _free_port() -> int:
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _env(devices: int):
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
             XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
  return env


def _cmd(out, *extra):
  return [sys.executable, "-m", "ddtree_jax.cli.generate", *ARGS, f"--output_json={out}", *extra]


def test_two_processes_match_one_process(tmp_path):
  port = _free_port()
  procs = [subprocess.Popen(_cmd(tmp_path / f"p{i}.json", "--mesh=1x8", f"--coordinator_address=127.0.0.1:{port}",
                                 "--num_processes=2", f"--process_id={i}"),
                            env=_env(4), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
           for i in range(2)]
  one = subprocess.run(_cmd(tmp_path / "one.json"), env=_env(1), capture_output=True, text=True, timeout=600, cwd=ROOT)
  outs = []
  for p in procs:
    try:
      outs.append(p.communicate(timeout=600))
    except subprocess.TimeoutExpired:
      p.kill()
      raise
  for p, (o, e) in zip(procs, outs):
    assert p.returncode == 0, o[-2000:] + e[-4000:]
  assert one.returncode == 0, one.stdout[-2000:] + one.stderr[-4000:]
  assert "2 process(es)" in outs[0][1] and "mesh 1x8" in outs[0][1], outs[0][1][-2000:]
  ref = json.load(open(tmp_path / "one.json"))["results"][0]["token_ids"]
  for i in range(2):
    got = json.load(open(tmp_path / f"p{i}.json"))["results"][0]["token_ids"]
    assert got == ref, f"process {i}: {got} != one process {ref}"
  assert len(ref) == 8
