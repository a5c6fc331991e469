"""Strips outputs and execution counts from notebooks (what is committed): python scripts/strip_notebooks.py [files]
Default: notebooks/*.ipynb. --check: exit 1 if any notebook has outputs (changes nothing)."""
import glob
import os
import sys

import nbformat

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def strip(nb) -> bool:
  changed = False
  for cell in nb.cells:
    if cell.cell_type != "code":
      continue
    if cell.get("outputs") or cell.get("execution_count") is not None:
      changed = True
    cell["outputs"], cell["execution_count"] = [], None
    for k in ("execution", "collapsed", "scrolled"):
      if cell.metadata.pop(k, None) is not None:
        changed = True
  for k in ("widgets",):
    if nb.metadata.pop(k, None) is not None:
      changed = True
  return changed


def main(argv):
  check = "--check" in argv
  files = [a for a in argv if a != "--check"] or sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))
  dirty = []
  for f in files:
    nb = nbformat.read(f, as_version=4)
    if strip(nb):
      dirty.append(f)
      if not check:
        nbformat.write(nb, f)
  for f in dirty:
    print(("has outputs: " if check else "stripped: ") + os.path.relpath(f, ROOT))
  return 1 if (check and dirty) else 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
