"""Plot the INT4 MoE over the whole token range from `benchmarks/kernels.py --only moe` JSON files.

  R=benchmarks/results/issue6_r10/call3/moe/kernels.json     # tenth round: k-chunked experts vs stored, one run
  python benchmarks/plot_moe.py --final $R --k-chunk 256 --earlier $R \
      --earlier-label "stored layout, same run" --out benchmarks/results/moe_int4_h200_r10.png

  R=benchmarks/results/issue6_r6
  python benchmarks/plot_moe.py --final $R/call3/moe/kernels.json,$R/call2/moe/kernels.json \
      --sweeps $R/call2/moe/kernels.json --earlier benchmarks/results/issue6_r5_final/kernels.json \
      --out benchmarks/results/moe_int4_h200_r6.png

Left: milliseconds per call against the token count M: the dispatched kernels (`--final`: the `default`
config of one or more runs, the first file that has a token count wins), the grouped kernel on nibbles.py's
float32 planes (the best `exact_bf16=False` config of the `--sweeps` runs: the same shapes before the bf16
planes), the memory roofline (INT4 weights and scales of the experts hit / the measured copy bandwidth) and the
compute roofline (6 M D I FLOPs / the measured bf16 matmul rate), and the bf16 baselines of REFERENCE.md
section 4 (one grouped GEMM there, x3 here for gate, up and down); `--earlier`: a previous run of the dispatched
kernels (e.g. round 5, timed with blocking samples).
Right: the fraction of the roofline (the larger of the two), with the issue's 0.75 target over 1-64 tokens
(memory-bound there).
"""
from __future__ import annotations

import argparse
import json

# REFERENCE.md section 4 (H200, per grouped GEMM 48 x [7168 -> 2048], lower end of each range), times 3.
REFERENCE_X3_MS = {
    "jax.lax.ragged_dot bf16 x3 (REFERENCE)": {8: 3 * 0.51, 64: 3 * 0.55, 512: 3 * 1.01, 4096: 3 * 7.6},
    "tokamax Mosaic GPU bf16 x3 (REFERENCE)": {8: 3 * 0.33, 64: 3 * 0.55, 512: 3 * 0.65, 4096: 3 * 0.84},
}


def _rows(path):
  with open(path) as f:
    return json.load(f)["moe"]


def _series(rows, pick):
  pts = sorted((r["M"], t) for r in rows if (t := pick(r)) is not None)
  return [m for m, _ in pts], [t for _, t in pts]


def _dispatched(paths, k_chunk=None, kernel="default"):
  """Rows of the `default` (dispatched) config from the runs in `paths`, the first run that has M winning; each
  row's time_s / frac_roofline are the default config's (not the best of its sweep). k_chunk: the default config
  timed on the expert arrays k-chunked that way (kernels.py's `k_chunk` key); None: on the stored layout.
  kernel: another config's "kernel" instead of "default" (a kernel the dispatch runs after the run was made)."""
  rows = {}
  for path in paths:
    for r in _rows(path):
      t = next((c["time_s"] for c in r.get("configs", []) if c["cfg"].get("kernel") == kernel and "time_s" in c
                and c["cfg"].get("k_chunk") == k_chunk), None)
      if t is not None and r["M"] not in rows:
        rows[r["M"]] = {**r, "time_s": t, "frac_roofline": r["roofline_s"] / t}
  return [rows[m] for m in sorted(rows)]


def moe_figure(final_jsons, sweep_jsons=(), earlier_json=None, *, k_chunk=None, earlier_k_chunk=None,
               earlier_label=None, final_kernel="default", earlier_kernel="default", final_label=None, device="H200"):
  """matplotlib Figure of the dispatched kernels (`final_jsons`: a path or a list of paths; their default configs
  on arrays k-chunked by `k_chunk`, None: stored) against the rooflines, the float32-planes configs of the sweep
  runs, an earlier dispatched run (its default configs at `earlier_k_chunk`; a path or a list of paths) and the
  REFERENCE baselines. final_kernel / earlier_kernel: the configs' "kernel" to draw instead of "default"; device:
  the GPU named in the title."""
  import matplotlib.pyplot as plt

  if isinstance(final_jsons, str):
    final_jsons = [final_jsons]
  if isinstance(earlier_json, str):
    earlier_json = [earlier_json]
  final = _dispatched(final_jsons, k_chunk, final_kernel)
  with open(final_jsons[0]) as f:
    ceil = json.load(f)["roofline"]
  f32_best = {}
  for path in sweep_jsons:
    for r in _rows(path):
      for c in r.get("configs", []):
        if c["cfg"].get("exact_bf16") is False and "time_s" in c and c.get("err", 1) < 2e-2:
          f32_best[r["M"]] = min(f32_best.get(r["M"], float("inf")), c["time_s"])

  fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.4))
  m, t = _series(final, lambda r: r["time_s"] * 1e3)
  layout = f", experts k-chunked ({k_chunk})" if k_chunk else ""
  a1.plot(m, t, "tab:red", marker="o",
          label=(final_label or "Pallas INT4, dispatched (few-token gemv, grouped above, as of the run)") + layout)
  if earlier_json:
    earlier = _dispatched(earlier_json, earlier_k_chunk, earlier_kernel)
    em, et = _series(earlier, lambda r: r["time_s"] * 1e3)
    a1.plot(em, et, "tab:orange", marker=".", ls=":",
            label=earlier_label or f"earlier run ({earlier_json[0].split('/')[-2]})")
  if f32_best:
    fm = sorted(f32_best)
    a1.plot(fm, [f32_best[k] * 1e3 for k in fm], "tab:purple", marker="s", ls="--",
            label="grouped, float32 planes (same shapes, before)")
  a1.plot(m, [r["roofline_mem_s"] * 1e3 for r in final], "k--",
          label=f"memory roofline ({ceil['copy_bw_Bps'] / 1e12:.2f} TB/s measured copy)")
  a1.plot(m, [r["flops"] / ceil["bf16_matmul_flops"] * 1e3 for r in final], "k:",
          label=f"compute roofline ({ceil['bf16_matmul_flops'] / 1e12:.0f} TFLOP/s measured bf16)")
  for (name, pts), style in zip(REFERENCE_X3_MS.items(), ("^", "v")):
    a1.plot(list(pts), list(pts.values()), color="tab:gray", marker=style, ls="-", alpha=0.7, label=name)
  a1.set_xscale("log", base=2)
  a1.set_yscale("log")
  a1.set_xlabel("M: tokens on this GPU (one local expert each, of top-8)")
  a1.set_ylabel("ms per call")
  a1.set_title(f"INT4 MoE on one {device}: 48 local experts, D 7168, I 2048, group 32")
  a1.legend(fontsize=7)
  a1.grid(True, which="both", alpha=0.2)

  a2.plot(m, [r["frac_roofline"] for r in final], "tab:red", marker="o", label=final_label or "dispatched")
  if earlier_json:
    a2.plot(em, [r["frac_roofline"] for r in earlier], "tab:orange", marker=".", ls=":",
            label=earlier_label or "earlier run")
  if f32_best:
    a2.plot(fm, [r["roofline_s"] / f32_best[r["M"]] for r in final if r["M"] in f32_best], "tab:purple",
            marker="s", ls="--", label="float32 planes (before)")
  a2.hlines(0.75, 1, 64, colors="tab:green", linestyles="--", label="target: 0.75 at 1-64 tokens")
  a2.set_xscale("log", base=2)
  a2.set_ylim(0, max([1.0] + [1.05 * r["frac_roofline"] for r in final]))   # (a pure read can outrun the copy)
  a2.set_xlabel("M")
  a2.set_ylabel("roofline / time")
  a2.set_title("fraction of the roofline (the larger of memory and compute)")
  a2.legend(fontsize=7)
  a2.grid(True, alpha=0.2)
  fig.tight_layout()
  return fig


def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--final", required=True, help="comma-separated kernels.json files with `default` configs")
  ap.add_argument("--sweeps", default="", help="comma-separated kernels.json files with exact_bf16=False configs")
  ap.add_argument("--earlier", default="", help="comma-separated kernels.json of an earlier dispatched run, drawn for "
                  "comparison")
  ap.add_argument("--final-kernel", default="default",
                  help="--final's configs of this \"kernel\" (default: the dispatch)")
  ap.add_argument("--earlier-kernel", default="default", help="--earlier's configs of this \"kernel\"")
  ap.add_argument("--final-label", default=None, help="legend label of --final")
  ap.add_argument("--device", default="H200", help="the GPU the runs were on, for the title")
  ap.add_argument("--k-chunk", type=int, default=None, help="--final's default configs on arrays k-chunked so")
  ap.add_argument("--earlier-k-chunk", type=int, default=None, help="--earlier's default configs at this k-chunk")
  ap.add_argument("--earlier-label", default=None, help="legend label of --earlier")
  ap.add_argument("--out", required=True, help="PNG to write")
  a = ap.parse_args()
  import matplotlib
  matplotlib.use("Agg")
  fig = moe_figure([p for p in a.final.split(",") if p], [p for p in a.sweeps.split(",") if p],
                   [p for p in a.earlier.split(",") if p] or None, k_chunk=a.k_chunk, earlier_k_chunk=a.earlier_k_chunk,
                   earlier_label=a.earlier_label, final_kernel=a.final_kernel, earlier_kernel=a.earlier_kernel,
                   final_label=a.final_label, device=a.device)
  fig.savefig(a.out, dpi=110, bbox_inches="tight")
  print(f"wrote {a.out}")


if __name__ == "__main__":
  main()
