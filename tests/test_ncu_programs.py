"""benchmarks/ncu_programs.py reads an Nsight Compute raw CSV report and keeps the last marked run of each
program (a synthetic report in ncu's format: its log lines, the header, the units row, then one row a kernel)."""
import gzip
import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import ncu_programs  # noqa: E402

HEADER = '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","gpu__time_duration.sum"'


def report(kernels):
  lines = ["==PROF== Connected to process 1 (python3)", HEADER, '"","","","","","","","ns"']
  lines += [f'"{i}","1","python3","h","{name}","1","7","{ns:,}"' for i, (name, ns) in enumerate(kernels)]
  return "\n".join(lines) + "\n==PROF== Disconnected from process 1\n"


@pytest.mark.parametrize("num_runs", [ncu_programs.RUNS, 1, 4])        # drive --runs
def test_last_run_of_each_program(tmp_path, capsys, num_runs):
  kernels = [("rng_bit_generator", 900)]
  for prog, (names, base) in enumerate(((["fusion_a", "mla_kernel", "mla_split_combine"], 1000),
                                        (["gemv_up", "gemv_down"], 5000))):
    for run in range(num_runs):
      kernels.append((f"{ncu_programs.MARK}{prog}_{run}", 1))
      kernels += [(n, base + 100 * run + k) for k, n in enumerate(names)]
      kernels.append((f"{ncu_programs.MARK}end", 1))
    kernels += [("autotuning_of_the_next_program", 77), ("loop_add_fusion", 2)]    # between the marked runs
  path = tmp_path / "ncu.csv"
  path.write_text(report(kernels))
  labels = tmp_path / "programs.json"
  labels.write_text(json.dumps(["mla decode", "moe 1 token"]))
  runs = ncu_programs.table(str(path), str(labels))
  last = 100 * (num_runs - 1)
  assert runs == {"mla decode": [("fusion_a", 1000 + last), ("mla_kernel", 1001 + last),
                                 ("mla_split_combine", 1002 + last)],
                  "moe 1 token": [("gemv_up", 5000 + last), ("gemv_down", 5001 + last)]}
  assert "| mla decode | 3 |" in capsys.readouterr().out
  gz = tmp_path / "ncu.csv.gz"
  with gzip.open(gz, "wt") as fh:
    fh.write(report(kernels))
  assert ncu_programs.table(str(gz), str(labels)) == runs


def test_slice_programs_run_and_carry_the_caches(tmp_path):
  """The slice programs (tiny dims on the CPU) run twice with their donated caches carried, and write the HLO."""
  import jax
  [(label, call)] = ncu_programs.slice_programs([(64, 3)], 1, hlo_dir=str(tmp_path), smoke=True)
  first, second = call(), call()
  assert first.shape == second.shape == (1, 3) and "ctx 64 T 3" in label
  assert jax.numpy.array_equal(first, second)            # same inputs, the cache rewritten at the same place
  assert "HloModule" in (tmp_path / "hlo_slice_64_3.txt").read_text()
