"""benchmarks/dispatch_hlo.py: its summary of an optimised HLO module (the entry computation, each fusion's body)."""
import os
import sys

import jax
import jax.numpy as jnp
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import dispatch_hlo  # noqa: E402


def test_summary_lists_the_entry_with_each_fusion_s_body():
  hlo = jax.jit(lambda x, y: (jnp.tanh(x) * 2).T @ y + 1).lower(jnp.ones((8, 4)), jnp.ones((8, 3))).compile().as_text()
  comps, entry = dispatch_hlo.computations(hlo)
  assert entry in comps and len(comps) > 1
  summary = dispatch_hlo.kernels_summary(hlo).splitlines()
  fusions = [i for i, line in enumerate(summary) if " fusion(" in line]
  assert fusions and all(summary[i + 1].startswith("      ") for i in fusions)   # each followed by its body
  assert any("tanh(" in line for line in summary) and any(" dot(" in line for line in summary)
  assert not any("metadata=" in line for line in summary)


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="checks the refusal on a backend without a GPU")
def test_refuses_without_a_gpu(monkeypatch, tmp_path):
  monkeypatch.setattr(sys, "argv", ["dispatch_hlo.py", "--tokens", "1", "--out", str(tmp_path / "h.txt")])
  with pytest.raises(SystemExit, match="needs a GPU backend"):
    dispatch_hlo.main()
  assert not (tmp_path / "h.txt").exists()
