"""The K2.6 cost model: fit on the stored slice measurements, load, and its qualitative shape."""
import json
import os

import pytest

from ddtree_jax import cost_model as cm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SLICE = os.path.join(ROOT, "benchmarks", "results", "k26_slice_h200_r19.json")  # the pallas fit in configs/cost_h200.json
SLICE_R10 = os.path.join(ROOT, "benchmarks", "results", "k26_slice_h200_r10.json")  # blocking times only


def test_load_and_shape():
  m = cm.load()
  assert m.fit.impl == "pallas" and m.fit.points >= 5 and m.fit.timing == "pipelined"
  ar, d8, d64 = m.round_s("ar", 0, 4096), m.round_s("ddtree", 8, 4096), m.round_s("ddtree", 64, 4096)
  assert 0 < ar < d8 < d64
  assert m.round_s("ddtree", 64, 32768) > d64                     # attention grows with the context
  assert m.with_interconnect("pcie").round_s("ddtree", 64, 4096) > d64
  b = m.breakdown("ddtree", 256, 32768)
  assert b["distinct_local_experts"] == pytest.approx(48 * (1 - (1 - 8 / 384) ** 257))
  with pytest.raises(ValueError):
    m.round_s("beam", 1, 1)


def test_refit_matches_stored(tmp_path):
  out = tmp_path / "cost.json"
  fits = cm.fit_from_bench(SLICE, str(out))
  stored = json.load(open(cm.DEFAULT_PATH))["fits"]
  assert [f.impl for f in fits] == ["pallas"]     # the r19 run (like r14) timed the xla path at two token counts only
  f = fits[0]
  assert f.c_expert == pytest.approx(stored["pallas"]["c_expert"]) and f.timing == "pipelined"
  doc = json.load(open(SLICE))
  for r in doc["rows"]:
    if r["impl"] == f.impl:     # the fit reproduces every measured slice time within 30 %
      pred = f.slice_time(r["T"], r["context"], sum(r["local_distinct"]), r["layers"])
      assert abs(pred - r["pipelined_s"]) / r["pipelined_s"] < 0.3


def test_refit_keeps_the_paths_it_cannot_fit(tmp_path):
  out = tmp_path / "cost.json"
  # the stored file: a pallas fit and an xla fit (the xla one from the r10 run, two token counts, fitted before
  # fit_slice required three)
  json.dump(json.load(open(cm.DEFAULT_PATH)), open(out, "w"))
  before = json.load(open(out))["fits"]
  assert set(before) == {"pallas", "xla"} and before["xla"].get("timing", "blocking") == "blocking"
  cm.fit_from_bench(SLICE, str(out))               # refits pallas only
  after = json.load(open(out))["fits"]
  assert after["xla"] == before["xla"]
  assert after["pallas"]["timing"] == "pipelined" and "k26_slice_h200_r19" in after["pallas"]["source"]
  assert "k26_slice_h200_r10" in cm.load(str(out), impl="xla").source
  few = tmp_path / "few.json"
  doc = json.load(open(SLICE))
  json.dump(dict(doc, rows=[r for r in doc["rows"] if r["T"] == 1]), open(few, "w"))
  with pytest.raises(ValueError, match="too few rows"):
    cm.fit_from_bench(str(few), str(tmp_path / "none.json"))


def test_fit_uses_the_pipelined_time_when_every_row_has_it():
  doc = json.load(open(SLICE_R10))
  blocking = cm.fit_slice(doc, "pallas")
  assert blocking.timing == "blocking"
  # the same rows with a pipelined time 0.3 ms below the blocking one (the host's part of a blocking call)
  piped = dict(doc, rows=[dict(r, pipelined_s=r["time_s"] - 3e-4) for r in doc["rows"]])
  fit = cm.fit_slice(piped, "pallas")
  assert fit.timing == "pipelined"
  assert fit.c_layer < blocking.c_layer                  # the per-call host time no longer lands in c_layer
  r = piped["rows"][0]
  pred = fit.slice_time(r["T"], r["context"], sum(r["local_distinct"]), r["layers"])
  assert abs(pred - r["pipelined_s"]) / r["pipelined_s"] < 0.3
  mixed = dict(doc, rows=piped["rows"][:-1] + doc["rows"][-1:])   # one row without: the blocking time for all
  assert cm.slice_timing(mixed["rows"]) == "blocking"


def test_allreduce():
  ic = cm.Interconnect("x", 100e9, 1e-5, gpus=8)
  assert ic.allreduce_s(0) == pytest.approx(1e-5)
  assert ic.allreduce_s(1e9) == pytest.approx(1e-5 + 1.75e-2)
  assert cm.Interconnect("one", 1e9, 1e-5, gpus=1).allreduce_s(1e6) == 0.0
  with pytest.raises(FileNotFoundError):
    cm.load("/nonexistent.json")
