"""Running `ddtree-generate` as the user does, in a subprocess on the CPU, for the CLI tests."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_generate(*args, stdin=None):
  """python -m ddtree_jax.cli.generate *args (stdin: the text it reads) -> the CompletedProcess (text output)."""
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
  return subprocess.run([sys.executable, "-m", "ddtree_jax.cli.generate", *args], capture_output=True, text=True,
                        env=env, cwd=ROOT, timeout=600, input=stdin)
