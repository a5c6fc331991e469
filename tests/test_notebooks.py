"""The notebooks run top to bottom from a fresh kernel (the venv's python3 kernelspec) on the CPU, and are
committed without outputs. The three run in parallel kernels (about a minute in all on 2 cores)."""
import concurrent.futures
import glob
import os
import sys

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NB_DIR = os.path.join(ROOT, "notebooks")
NOTEBOOKS = sorted(os.path.basename(p) for p in glob.glob(os.path.join(NB_DIR, "*.ipynb")))


def test_notebooks_present_and_stripped():
  assert NOTEBOOKS == ["kernels.ipynb", "kimi_k26_checkpoint.ipynb", "quickstart.ipynb"]
  for name in NOTEBOOKS:
    nb = nbformat.read(os.path.join(NB_DIR, name), as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
      if cell.cell_type == "code":
        assert cell.outputs == [] and cell.execution_count is None, (
            f"{name} has outputs: run python scripts/strip_notebooks.py")


def test_notebooks_are_what_the_builder_writes(tmp_path):
  """The cells live in notebooks/build_notebooks.py: an edit made only in a .ipynb would be lost at the next build."""
  sys.path.insert(0, NB_DIR)
  try:
    import build_notebooks
  finally:
    sys.path.remove(NB_DIR)
  for name, cells in build_notebooks.NOTEBOOKS.items():
    build_notebooks.write(name, cells, out_dir=str(tmp_path))
    with open(tmp_path / name) as built, open(os.path.join(NB_DIR, name)) as committed:
      assert built.read() == committed.read(), f"{name} differs from build_notebooks.py: run it and commit both"


def _execute(name, workdir):
  nb = nbformat.read(os.path.join(NB_DIR, name), as_version=4)
  client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=240, resources={"metadata": {"path": workdir}})
  client.execute()
  return nb


def _text(nb):
  out = []
  for cell in nb.cells:
    for o in cell.get("outputs", []):
      out.append(o.get("text", "") if o.output_type == "stream" else str(o.get("data", {}).get("text/plain", "")))
  return "\n".join(out)


@pytest.mark.e2e
def test_notebooks_execute(tmp_path, monkeypatch):
  monkeypatch.setenv("JAX_PLATFORMS", "cpu")
  monkeypatch.setenv("PYTHONPATH", ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  # The notebooks write their pictures into their working directory: a scratch one here.
  work = tmp_path / "notebooks"
  work.mkdir()
  with concurrent.futures.ThreadPoolExecutor(len(NOTEBOOKS)) as pool:
    futures = {n: pool.submit(_execute, n, str(work)) for n in NOTEBOOKS}
    done = {n: f.result() for n, f in futures.items()}
  for name, nb in done.items():
    text = _text(nb)
    # The kernel is the test's own interpreter (the venv's python3 kernelspec).
    assert f"python: {sys.executable}" in text or f"python: {os.path.realpath(sys.executable)}" in text, text[:500]
  q = _text(done["quickstart.ipynb"])
  assert "identical token ids at T=0: True" in q and ": stop_string after " in q
  assert (work / "quickstart_tree.png").stat().st_size > 0
  c = _text(done["kimi_k26_checkpoint.ipynb"])
  assert "ddtree-convert: wrote" in c and "KimiK25ForConditionalGeneration" in c and "ddtree-plan --config=kimi_k2_6" in c
  for png in ("kernels_mla_roofline.png", "kernels_mla_fraction.png", "kernels_moe.png", "kernels_tree.png"):
    assert (work / png).stat().st_size > 0
