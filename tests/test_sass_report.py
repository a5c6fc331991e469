"""benchmarks/sass_report.py's first step (lower, CPU only): the Triton IR of the MLA attention kernel (its own module
only) and of the split combine is written, one module each."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def lower(tmp_path, *args):
  out = tmp_path / args[1]                                                        # one directory per kernel
  subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "sass_report.py"), "lower", *args,
                  "--out", str(out)], check=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT),
                 capture_output=True, text=True)
  return sorted(os.listdir(out)), out


def test_lower_mla_and_combine(tmp_path):
  files, out = lower(tmp_path, "--kernel", "mla", "--shape", "1,1,8,4096")         # 8-head decode: with splits
  assert files == ["mla_1.ttir"] and "mla_tree_attention" in (out / files[0]).read_text()
  files, out = lower(tmp_path, "--kernel", "mla_combine", "--shape", "1,128,64,bfloat16",
                     "--kwargs", "splits_per_step=128, block_rows=1, block_cols=32")
  assert files == ["mla_combine_1.ttir"] and "mla_split_combine" in (out / files[0]).read_text()
