"""The training corpus: the Python standard library source of the running interpreter.

Files are split into train / val / test by a hash of their path relative to the stdlib root, so a
file's split never depends on which other files exist (different Python patch versions agree on
every file they share). `site-packages` and non-UTF-8 files are left out.
"""
from __future__ import annotations

import hashlib
import os
import platform
import re
import sysconfig
from typing import Iterator, Optional

SPLITS = ("train", "val", "test")
# Per mille of files in each split (by path hash).
SPLIT_BOUNDS = {"train": (0, 900), "val": (900, 950), "test": (950, 1000)}


def stdlib_root() -> str:
  return sysconfig.get_paths()["stdlib"]


def split_of(relpath: str) -> str:
  """The split of a stdlib file given its '/'-separated path relative to the stdlib root."""
  h = int.from_bytes(hashlib.sha256(relpath.replace(os.sep, "/").encode()).digest()[:8], "big") % 1000
  for name, (lo, hi) in SPLIT_BOUNDS.items():
    if lo <= h < hi:
      return name
  raise AssertionError(h)


def check_root(root: str) -> str:
  """root, if it is a directory holding a Python standard library (os.py at its top)."""
  if not os.path.isfile(os.path.join(root, "os.py")):
    raise FileNotFoundError(f"{root!r} is not a Python standard library directory (no os.py in it); "
                            "expected e.g. /usr/lib/python3.12")
  return root


def iter_files(root: Optional[str] = None) -> Iterator[str]:
  """Relative paths of the stdlib's .py files, sorted."""
  root = check_root(root) if root else stdlib_root()
  out = []
  for d, dirs, files in os.walk(root):
    dirs[:] = sorted(x for x in dirs if x not in ("site-packages", "dist-packages", "__pycache__"))
    for f in files:
      if f.endswith(".py"):
        out.append(os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/"))
  yield from sorted(out)


def load_split(split: str, root: Optional[str] = None, max_files: Optional[int] = None) -> list[tuple[str, str]]:
  """[(relpath, text)] of one split, sorted by path."""
  if split not in SPLITS:
    raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
  root = root or stdlib_root()
  out = []
  for rel in iter_files(root):
    if split_of(rel) != split:
      continue
    try:
      with open(os.path.join(root, rel), encoding="utf-8") as f:
        text = f.read()
    except (UnicodeDecodeError, OSError):
      continue
    if text.strip():
      out.append((rel, text))
    if max_files and len(out) >= max_files:
      break
  return out


def _version_of(root: str) -> str:
  """The Python version of a stdlib directory (its name, e.g. python3.12), or the running one's."""
  if os.path.realpath(root) == os.path.realpath(stdlib_root()):
    return platform.python_version()
  m = re.fullmatch(r"python(\d+\.\d+)", os.path.basename(os.path.normpath(root)))
  return m.group(1) if m else "unknown"


def corpus_info(root: Optional[str] = None) -> dict:
  """What the corpus was built from (recorded next to the checkpoints)."""
  root = root or stdlib_root()
  counts = {s: 0 for s in SPLITS}
  nbytes = {s: 0 for s in SPLITS}
  for rel in iter_files(root):
    s = split_of(rel)
    counts[s] += 1
    nbytes[s] += os.path.getsize(os.path.join(root, rel))
  return {"source": "Python standard library (.py files, site-packages excluded)",
          "python_version": _version_of(root), "stdlib_root": root,
          "split_rule": "sha256(relative path)[:8] mod 1000: train [0,900), val [900,950), test [950,1000)",
          "files": counts, "bytes": nbytes}
