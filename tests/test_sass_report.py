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


def test_loop_counts_barriers_and_shared_memory():
  """compile's counts on a hand-written nvdisasm excerpt: a loop (a branch back to its label) with a layout
  conversion's barriers and shared-memory round trip, predicated instructions counted by opcode."""
  sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
  from sass_report import loop_histograms, opcode_counts, sync_counts
  sass = "\n".join([
      "        /*0000*/                   MOV R1, c[0x0][0x28] ;",
      ".L_x_1:",
      "        /*0010*/                   LDG.E.128 R4, desc[UR4][R2.64] ;",
      "        /*0020*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;",
      "        /*0030*/                   STS [R0], R4 ;",
      "        /*0040*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;",
      "        /*0050*/                   LDS R5, [R0] ;",
      "        /*0060*/                   FFMA R6, R4, R5, R6 ;",
      "        /*0070*/               @P0 BRA `(.L_x_1) ;",
      "        /*0080*/                   EXIT ;"])
  ((label, first, last), ops), = loop_histograms(sass).items()
  assert (label, first, last) == (".L_x_1", 1, 8)
  assert ops == {"LDG": 1, "BAR": 2, "STS": 1, "LDS": 1, "FFMA": 1, "BRA": 1}
  assert sync_counts(ops) == "BAR 2 STS 1 LDS 1 STSM 0 LDSM 0"
  assert sum(opcode_counts(sass.splitlines()).values()) == 9
