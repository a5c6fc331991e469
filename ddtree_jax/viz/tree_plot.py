"""Render one round's draft tree to PNG: tokens on nodes, the drafter's probabilities on edges, the
accepted path highlighted, the target's bonus token after it.

Layout: depth grows left to right (the text reads along the accepted path); siblings are stacked top to
bottom in pop order (the best-first build pops higher-scoring prefixes first). Uses matplotlib's object
API only (no pyplot state), so it works headless and inside notebooks.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

ROLE_COLOURS = {"root": "#4c72b0", "accepted": "#55a868", "rejected": "#e8e8e8", "bonus": "#f0c05a"}


def node_roles(parents: Sequence[int], valid: Sequence[bool], path: Sequence[int]) -> list[str]:
  """Role of each node of an [N+1] tree: "root" (index 0), "accepted" (on the accepted path), "rejected"
  (a valid node off the path) or "padding" (not a node). Raises if `path` is not a root-first chain."""
  n1 = len(parents)
  path = [int(i) for i in path]
  if not path or path[0] != 0:
    raise ValueError(f"accepted path must start at the root (index 0), got {path}")
  for a, b in zip(path, path[1:]):
    if not (0 < b < n1) or not valid[b] or int(parents[b]) != a:
      raise ValueError(f"accepted path {path}: node {b} is not a valid child of node {a}")
  on_path = set(path)
  roles = []
  for i in range(n1):
    if i == 0:
      roles.append("root")
    elif not valid[i]:
      roles.append("padding")
    else:
      roles.append("accepted" if i in on_path else "rejected")
  return roles


BONUS = -2   # layout key of the bonus token (drawn as the last child of the last accepted node)


def _layout(parents, valid, last: Optional[int] = None) -> dict[int, tuple[float, float]]:
  """Node -> (x = depth, y = row), leaves on consecutive rows in depth-first pop order, parents centred.
  With `last`, the bonus pseudo-node BONUS is placed as the last child of node `last`."""
  children: dict[int, list[int]] = {}
  for i in range(1, len(parents)):
    if valid[i]:
      children.setdefault(int(parents[i]), []).append(i)
  if last is not None:
    children.setdefault(last, []).append(BONUS)
  pos: dict[int, tuple[float, float]] = {}
  row = [0]

  def place(n, depth):
    kids = children.get(n, [])
    if not kids:
      pos[n] = (depth, float(row[0]))
      row[0] += 1
    else:
      for k in kids:
        place(k, depth + 1)
      ys = [pos[k][1] for k in kids]
      pos[n] = (depth, (min(ys) + max(ys)) / 2)

  import sys
  sys.setrecursionlimit(max(sys.getrecursionlimit(), 4 * len(parents) + 100))
  place(0, 0)
  return pos


def token_label(token: int, tokenizer=None, width: int = 12) -> str:
  """A short visible label: the decoded text with spaces/newlines/tabs made visible, else the id."""
  if tokenizer is None or token < 0:
    return str(int(token))
  text = tokenizer.decode([int(token)])
  text = text.replace("\\", "\\\\").replace("\n", "\u21b5").replace("\t", "\u21e5").replace(" ", "\u2423")
  text = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)
  if len(text) > width:
    text = text[:width - 1] + "\u2026"
  return text or "\u2205"


def plot_tree(trace, tokenizer=None, path: Optional[str] = None, *, title: Optional[str] = None,
              max_nodes: Optional[int] = None, dpi: int = 110):
  """Draws a `viz.trace.RoundTrace` (or any object with tokens/parents/depths/scores/valid/path/bonus [and
  target_tokens]). Writes a PNG to `path` when given. Returns the matplotlib Figure.

  tokenizer: decodes node tokens (ids shown otherwise). max_nodes: draw only the first nodes in pop order
  (the highest-scoring prefixes; the accepted path is always kept).
  """
  from matplotlib.figure import Figure
  from matplotlib.patches import FancyBboxPatch

  tokens = np.asarray(trace.tokens)
  parents = np.asarray(trace.parents)
  scores = np.asarray(trace.scores, np.float64)
  valid = np.asarray(trace.valid, bool).copy()
  acc = [int(i) for i in trace.path]
  roles = node_roles(parents, valid, acc)
  if max_nodes is not None:
    keep = np.zeros_like(valid)
    keep[:max_nodes + 1] = True
    keep[acc] = True
    valid &= keep
  last = acc[-1]
  pos = _layout(parents, valid, last)
  bonus_xy = pos.pop(BONUS)

  n_rows = max(y for _, y in pos.values()) + 1
  max_depth = max(bonus_xy[0], max(x for x, _ in pos.values()))
  fig = Figure(figsize=(1.45 * (max_depth + 1) + 1.0, 0.42 * n_rows + 1.3), dpi=dpi)
  ax = fig.add_subplot(1, 1, 1)
  ax.set_xlim(-0.6, max_depth + 0.6)
  ax.set_ylim(n_rows - 0.4, -0.9)
  ax.axis("off")

  # Edges with the drafter's conditional probability q(child | parent) = exp(score - parent score).
  on_path_edges = set(zip(acc, acc[1:]))
  for i, (x, y) in pos.items():
    if i == 0:
      continue
    p = int(parents[i])
    px, py = pos[p]
    hot = (p, i) in on_path_edges
    ax.plot([px + 0.32, x - 0.32], [py, y], color="#2d7a3e" if hot else "#9a9a9a", lw=2.4 if hot else 0.8,
            zorder=1)
    prob = float(np.exp(scores[i] - scores[p]))
    f = 0.72   # label near the child end, where edges fan out
    ax.text(px + 0.32 + f * (x - px - 0.64), py + f * (y - py), f"{prob:.2f}", fontsize=6.5, ha="center",
            va="center", color="#2d7a3e" if hot else "#555555", zorder=3,
            bbox=dict(boxstyle="round,pad=0.1", fc="white", ec="none", alpha=0.85))
  lx, ly = pos[last]
  ax.plot([lx + 0.32, bonus_xy[0] - 0.32], [ly, bonus_xy[1]], color="#b8860b", lw=1.6, ls="--", zorder=1)

  def box(xy, label, colour, bold=False):
    ax.add_patch(FancyBboxPatch((xy[0] - 0.31, xy[1] - 0.22), 0.62, 0.44, boxstyle="round,pad=0.02",
                                fc=colour, ec="#333333" if bold else "#999999", lw=1.2 if bold else 0.5, zorder=2))
    ax.text(xy[0], xy[1], label, fontsize=7.5, ha="center", va="center", zorder=4,
            fontweight="bold" if bold else "normal", family="monospace")

  for i, xy in pos.items():
    role = roles[i]
    box(xy, token_label(int(tokens[i]), tokenizer), ROLE_COLOURS[role], bold=role != "rejected")
  box(bonus_xy, token_label(int(trace.bonus), tokenizer), ROLE_COLOURS["bonus"], bold=True)

  n_valid = int(np.asarray(trace.valid).sum()) - 1
  if title is None:
    title = (f"round {getattr(trace, 'round', '?')}: {n_valid} draft nodes, {len(acc) - 1} accepted + bonus "
             f"= {len(acc)} tokens")
  ax.set_title(title, fontsize=9, loc="left")
  from matplotlib.patches import Patch
  ax.legend(handles=[Patch(fc=ROLE_COLOURS[r], ec="#333333", label=l) for r, l in
                     (("root", "root (last round's bonus)"), ("accepted", "accepted draft"),
                      ("rejected", "rejected draft"), ("bonus", "target's bonus token"))],
            loc="lower left", fontsize=7, frameon=False, ncol=4, bbox_to_anchor=(0, -0.02 - 0.5 / max(n_rows, 1)))
  fig.tight_layout()
  if path is not None:
    fig.savefig(path, dpi=dpi)
  return fig
