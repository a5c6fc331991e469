"""benchmarks/mla_decode_parts.py --smoke runs on the CPU (Mosaic GPU interpret mode) and writes its JSON."""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))


def test_smoke(tmp_path):
  import mla_decode_parts
  out = tmp_path / "parts.json"
  rows = mla_decode_parts.main(["--smoke", "--out", str(out)])
  doc = json.load(open(out))
  assert doc["smoke"] and doc["rows"] == rows and len(rows) == 1
  times = rows[0]["times_s"]
  assert set(times) == {"harness", "dispatch", "kernel", "mask", "combine_harness", "combine_xla", "combine_pallas"}
  assert all(v > 0 for v in times.values())
  assert rows[0]["mosaic_splits"] >= 1 and rows[0]["dispatch_kernel"] == "mosaic_interpret"
