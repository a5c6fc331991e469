"""benchmarks/matvec_forms.py --smoke runs on the CPU: every form of every product matches the fp32 reference and
says what XLA compiled (the GPU run is the real one)."""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))


def test_smoke(tmp_path):
  import matvec_forms
  out = tmp_path / "mv.json"
  rows = matvec_forms.main(["--smoke", "--out", str(out)])
  assert len(rows) == len(matvec_forms.SMOKE_PRODUCTS) * len(matvec_forms.FORMS)
  assert all(r["rel_err"] < 2e-2 and r["seconds"] > 0 and r["compiled"] for r in rows)
  assert json.loads(out.read_text())["rows"][0]["form"] == "plain"
