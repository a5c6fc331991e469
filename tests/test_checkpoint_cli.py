"""ddtree-convert end to end (a subprocess, as a user runs it)."""
import os
import subprocess
import sys

import pytest

from configs.tiny import tiny
from ddtree_jax.checkpoint import orbax_io, synthetic

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_convert(*args, devices: int = 1):
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
             XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={devices}").strip())
  return subprocess.run([sys.executable, "-m", "ddtree_jax.cli.convert", *args], env=env, capture_output=True,
                        text=True, timeout=120)


def test_cli_converts_and_refuses_to_overwrite(tmp_path):
  hf = synthetic.write_target_checkpoint(str(tmp_path / "hf"), tiny(), layout="k26", n_shards=3)
  (tmp_path / "hf" / "tiktoken.model").write_text("")
  dr = synthetic.write_drafter_checkpoint(str(tmp_path / "dr"), synthetic.tiny_drafter_config(tiny()))
  out = str(tmp_path / "out")
  r = run_convert(f"--hf_dir={hf}", f"--drafter_dir={dr}", f"--out_dir={out}", "--dtype=float32")
  assert r.returncode == 0, r.stderr[-3000:]
  assert "skipped vision tower/projector 7 tensors" in r.stdout
  assert "convert" in r.stderr and "tensors=" in r.stderr        # the tqdm bar (bytes + tensor count)
  m = orbax_io.read_manifest(out)
  assert m["dtype"] == "float32" and m["drafter"] and set(m["target"]["groups"]) >= {"embed_tokens", "layers.0", "lm_head"}
  assert os.path.exists(os.path.join(out, "tiktoken.model"))
  r = run_convert(f"--hf_dir={hf}", f"--out_dir={out}")
  assert r.returncode == 1 and "already exists" in r.stderr and "--overwrite" in r.stderr
  r = run_convert(f"--hf_dir={tmp_path / 'nope'}", f"--out_dir={tmp_path / 'out2'}")
  assert r.returncode == 1 and "not a directory" in r.stderr and not os.path.exists(tmp_path / "out2")


@pytest.mark.e2e
def test_cli_mesh_is_data_x_model(tmp_path):
  """--mesh takes DATAxMODEL like every CLI (the shared parser, clear errors); the manifest records the mesh."""
  hf = synthetic.write_target_checkpoint(str(tmp_path / "hf"), tiny(), n_shards=1)
  out = str(tmp_path / "out")
  r = run_convert(f"--hf_dir={hf}", f"--out_dir={out}", "--mesh=expert=8")
  assert r.returncode == 2 and "expected DATAxMODEL" in r.stderr and "'expert=8' is 1x8" in r.stderr, r.stderr[-2000:]
  r = run_convert(f"--hf_dir={hf}", f"--out_dir={out}", "--mesh=1x8")
  assert r.returncode == 2 and "needs 8 devices, but 1 are visible" in r.stderr, r.stderr[-2000:]
  assert not os.path.exists(out)
  r = run_convert(f"--hf_dir={hf}", f"--out_dir={out}", "--mesh=2x4", "--dtype=float32", "--noprogress", devices=8)
  assert r.returncode == 0, r.stderr[-3000:]
  assert "mesh 2x4 (data x model) over 8 cpu devices" in r.stderr
  assert orbax_io.read_manifest(out)["mesh"] == {"data": 2, "model": 4}
