"""Plot the MLA kernels' fraction of the roofline per shape from `benchmarks/kernels.py --only mla` JSON files.

  R=benchmarks/results
  python benchmarks/plot_mla.py --final $R/issue6_r7/call3/mla/kernels.json \
      --earlier $R/issue6_r6/call2/mla/kernels.json,$R/issue6_r6/call3/mla/kernels.json --out $R/mla_h200_r7.png

One pair of bars per shape (B, T queries, H heads, context), in the order of the `--final` run: the earlier
run's best time (`--earlier`, e.g. round 6, Triton only) and the final run's (e.g. round 7, the dispatch), each
as a fraction of its own run's roofline (the larger of bytes / measured copy bandwidth and FLOPs / measured bf16
matmul rate). Blue: memory-bound, red: compute-bound; dashed lines: the issue's targets 0.8 and 0.6. Where
several files of one side time a shape, the first wins.
"""
from __future__ import annotations

import argparse
import json

TARGETS = {"memory": 0.8, "compute": 0.6}


def _timed_rows(paths):
  """{(B, T, H, ctx): row} over the files, the first file that timed a shape wins; the order of first sight."""
  rows = {}
  for path in paths:
    with open(path) as f:
      for r in json.load(f)["mla"]:
        if "frac_roofline" in r:
          rows.setdefault((r["B"], r["T"], r["H"], r["ctx"]), r)
  return rows


def mla_figure(final_paths, earlier_paths=(), final_label="final", earlier_label="earlier"):
  import matplotlib.pyplot as plt
  import numpy as np

  final = _timed_rows(final_paths)
  earlier = _timed_rows(earlier_paths)
  shapes = list(final)
  x = np.arange(len(shapes))
  colour = ["tab:blue" if final[s]["bound"] == "memory" else "tab:red" for s in shapes]
  fig, ax = plt.subplots(figsize=(10.5, 4))
  if earlier:
    ax.bar(x - 0.2, [earlier[s]["frac_roofline"] if s in earlier else np.nan for s in shapes], width=0.4,
           color=colour, alpha=0.35, label=earlier_label)
  ax.bar(x + (0.2 if earlier else 0), [final[s]["frac_roofline"] for s in shapes], width=0.4, color=colour,
         label=final_label)
  for bound, target in TARGETS.items():
    ax.axhline(target, color="tab:blue" if bound == "memory" else "tab:red", ls="--", lw=1,
               label=f"target, {bound}-bound ({target})")
  ax.set_xticks(x, [f"B{b} T{t} H{h}\n{c // 1024}K" for (b, t, h, c) in shapes], fontsize=6.5)
  ax.set_ylabel("fraction of the roofline\n(each run's measured ceilings)")
  ax.set_ylim(0, 1.15)
  ax.set_title("MLA tree attention on the H200 (blue: memory-bound, red: compute-bound)")
  ax.legend(fontsize=7, loc="upper right")
  fig.tight_layout()
  return fig


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--final", required=True, help="comma-separated kernels.json files of the run to show")
  ap.add_argument("--earlier", default="", help="comma-separated kernels.json files of a run to compare with")
  ap.add_argument("--final-label", default="round 7, call 3: dispatch (Mosaic GPU from 64 query rows)")
  ap.add_argument("--earlier-label", default="round 6: Triton kernel")
  ap.add_argument("--out", required=True, help="PNG to write")
  a = ap.parse_args(argv)
  import matplotlib
  matplotlib.use("Agg")
  fig = mla_figure(a.final.split(","), [p for p in a.earlier.split(",") if p], a.final_label, a.earlier_label)
  fig.savefig(a.out, dpi=110)
  print(f"wrote {a.out}")


if __name__ == "__main__":
  main()
