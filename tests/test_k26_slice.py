"""benchmarks/k26_slice.py --smoke runs on the CPU and writes its JSON (the GPU run is the real one)."""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))


def test_smoke(tmp_path):
  import k26_slice
  out = tmp_path / "k26.json"
  rows = k26_slice.main(["--smoke", "--moe_layers", "1", "--contexts", "64", "--budgets", "8", "--out", str(out)])
  doc = json.load(open(out))
  assert doc["smoke"] and len(doc["rows"]) == len(rows) >= 4
  r = rows[-1]
  assert r["time_s"] > 0 and r["pipelined_s"] > 0 and r["bytes"] > 0 and r["flops"] > 0 and r["roofline_s"] > 0
  assert {x["routing"] for x in rows} == {"random", "zipf"}
  assert {x["mla_kernel"] for x in rows} == {"xla"}       # the CPU: the dispatch's fallback, recorded per row


def test_accounting_k26():
  import k26_slice
  d = k26_slice.H200
  assert (d.heads, d.experts, d.vocab) == (8, 48, 20480)
  assert abs(d.expert_bytes() - 24.8e6) < 0.1e6          # REFERENCE: 24.8 MB per INT4 expert
  assert d.attn_core_flops(257, 32768 - 257) * 8 == 2 * 257 * 64 * 32768 * 1088
