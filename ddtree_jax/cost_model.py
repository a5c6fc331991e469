"""Cost of one speculative round of Kimi K2.6 on an 8-GPU mesh, fitted to the one-GPU slice benchmark.

Per GPU (the slowest GPU sets the pace; all GPUs run the same layers), for a forward of T tokens
(T = 1 for AR, N + 1 for a DDTree of N nodes, block_size for a DFlash chain) over a context of `ctx`:

  target(T, ctx) = head + L * (c_layer + c_token*T + c_attn*F(T, ctx) + c_ctx*ctx)
                        + L_moe * c_expert * E_local(T) + dense_extra
  F(T, ctx) = 2 * T * H_local * (ctx + T) * (512 + 64 + 512)   [absorbed MLA FLOPs per layer]
  E_local(T) = E_local_total * (1 - (1 - k/E)^T)              [distinct local experts, uniform routing;
                                                                 pass a measured count for skewed routing]
  comm(T)   = 2 * L * allreduce(T * hidden * 2 bytes)           [after o_proj and after the MLP]
  allreduce(b) = latency + 2 (p-1)/p * b / bus_bw              [ring all-reduce]
  drafter   = bytes_drafter_per_GPU / weight_rate + 2 * L_d * allreduce(block * hidden * 2)
  round     = target + comm + drafter + overhead (tree build, walk, compaction; 0 unless stated)

The c_* coefficients come from a non-negative least-squares fit to `benchmarks/k26_slice.py`'s rows
(1 dense + 3 MoE layers, random and Zipf routing, contexts 4K and 32K, T in 1..257), one set per kernel
path ("pallas", "xla"); they are stored in `configs/cost_h200.json`. The time fitted is the slice's pipelined
time per call (calls enqueued back to back: the device's time, as in the engine, whose host runs ahead with
several rounds per call) where the slice JSON has it, else the blocking time (which also carries ~0.3-0.4 ms of
host dispatch per call and so over-counts c_layer; `SliceFit.timing` says which). The slice always holds 4 layers and
one lm_head shard, so its constant is split: `head` = lm_head shard bytes at the measured copy bandwidth,
the rest spread over the 4 layers (c_layer); `dense_extra` = (dense MLP - MoE fixed weights) bytes at
the copy bandwidth. `weight_rate` (the drafter's weight streaming rate) = one INT4 expert's bytes /
c_expert, i.e. the rate the measured expert kernel streams weights at.

Interconnect assumptions (stated, not measured here):
  NVLink (8 x H200, NVSwitch): 450 GB/s bus bandwidth per direction, 8 us per all-reduce latency.
  PCIe (8 x RTX PRO 6000 Blackwell, PCIe 5.0 x16, no NVLink): 50 GB/s, 20 us latency.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Optional, Sequence

import numpy as np

DEFAULT_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs", "cost_h200.json")
FEATURES = ("layer", "token", "attn_flop", "ctx", "expert")


@dataclasses.dataclass(frozen=True)
class Interconnect:
  name: str
  bus_bw: float          # bytes/s per direction (NCCL "bus bandwidth")
  latency_s: float       # per all-reduce
  gpus: int = 8

  def allreduce_s(self, nbytes: float) -> float:
    p = self.gpus
    if p <= 1:
      return 0.0
    return self.latency_s + 2 * (p - 1) / p * nbytes / self.bus_bw


NVLINK_H200 = Interconnect("NVLink/NVSwitch 8xH200 (assumed 450 GB/s bus bw, 8 us latency)", 450e9, 8e-6)
PCIE_RTX_PRO_6000 = Interconnect("PCIe 5.0 8xRTX PRO 6000 (assumed 50 GB/s bus bw, 20 us latency)", 50e9, 20e-6)
INTERCONNECTS = {"nvlink": NVLINK_H200, "pcie": PCIE_RTX_PRO_6000}


@dataclasses.dataclass(frozen=True)
class ModelShape:
  """K2.6 on an 8-way mesh (per-GPU quantities), and the K2.6 DFlash drafter (REFERENCE.md section 2)."""
  layers: int = 61
  moe_layers: int = 60
  hidden: int = 7168
  heads_local: int = 8
  experts_total: int = 384
  experts_local: int = 48
  top_k: int = 8
  latent: int = 512 + 64 + 512          # absorbed MLA FLOPs per (query, head, key) / 2
  drafter_layers: int = 6
  drafter_block: int = 8
  # Drafter bytes per GPU: 6 layers x (q 7168x8192 + k,v 7168x1024 + o 8192x7168 + MLP 3x7168x18432) / 8
  # (split by the DRAFTER_RULES) + fc [6*7168, 7168] replicated + the target's lm_head shard, all bf16.
  drafter_bytes_per_gpu: float = 2 * (6 * (7168 * 8192 * 2 + 7168 * 1024 * 2 + 3 * 7168 * 18432) / 8
                                      + 6 * 7168 * 7168 + 7168 * 163840 / 8)

  def attn_flops(self, t: int, ctx: int) -> float:
    return 2.0 * t * self.heads_local * (ctx + t) * self.latent

  def distinct_local_experts(self, t: int) -> float:
    return self.experts_local * (1 - (1 - self.top_k / self.experts_total) ** t)


@dataclasses.dataclass(frozen=True)
class SliceFit:
  """Coefficients (seconds per unit) of one kernel path, and the quality of the fit."""
  impl: str
  c_layer: float
  c_token: float
  c_attn_flop: float
  c_ctx: float
  c_expert: float
  head_s: float
  dense_extra_s: float
  weight_rate: float       # bytes/s
  rmse_s: float
  max_rel_err: float
  points: int
  timing: str = "blocking"   # which slice time was fitted: "blocking" (time_s) or "pipelined" (pipelined_s)
  source: str = ""           # the slice JSON fitted (file, device, date)

  def slice_time(self, t, ctx, local_distinct_sum, layers=4, shape: ModelShape = ModelShape()):
    """Prediction for the benchmark's slice (for checking the fit)."""
    return (self.head_s + self.dense_extra_s + layers * (self.c_layer + self.c_token * t
            + self.c_attn_flop * shape.attn_flops(t, ctx) + self.c_ctx * ctx) + self.c_expert * local_distinct_sum)


def _nnls(x: np.ndarray, y: np.ndarray) -> np.ndarray:
  """Least squares with non-negative coefficients (drop the most negative feature and refit)."""
  active = list(range(x.shape[1]))
  while True:
    c, *_ = np.linalg.lstsq(x[:, active], y, rcond=None)
    if (c >= 0).all() or len(active) == 1:
      out = np.zeros(x.shape[1])
      out[active] = np.maximum(c, 0)
      return out
    active.pop(int(np.argmin(c)))


def slice_timing(rows: Sequence[dict]) -> str:
  """The time a fit uses: "pipelined" (pipelined_s: calls enqueued back to back, the device's time) when every row
  has it, else "blocking" (time_s: each call waited for, which also carries the host's dispatch of the call;
  slice JSONs before issue 6's fourteenth round have only this one)."""
  return "pipelined" if rows and all("pipelined_s" in r for r in rows) else "blocking"


TIME_KEYS = {"pipelined": "pipelined_s", "blocking": "time_s"}


def fit_slice(doc: dict, impl: str, shape: ModelShape = ModelShape()) -> Optional[SliceFit]:
  """Fits one kernel path's coefficients to the rows of a k26_slice JSON document (see slice_timing)."""
  # rows of the model's weight layout only (k26_slice.py --layouts may time others next to it)
  model_layout = doc.get("model_layout", "kn")
  rows = [r for r in doc["rows"] if r["impl"] == impl and r.get("layout", model_layout) == model_layout]
  if len(rows) < len(FEATURES) or len({r["T"] for r in rows}) < 3:
    return None              # too few points, or too few token counts to separate c_token from c_expert
  timing = slice_timing(rows)
  per = doc["per_gpu"]
  ceil = doc["ceilings"]["copy_bytes_per_s"]
  head_s = 2 * doc["dims"]["hidden"] * per["vocab"] / ceil
  dense_extra_s = max(0.0, (2 * 3 * doc["dims"]["hidden"] * per["dense_inter"]
                            - 2 * 3 * doc["dims"]["hidden"] * per["shared_inter"]
                            - 2 * doc["dims"]["hidden"] * doc["dims"]["experts_total"]) / ceil)
  x, y = [], []
  for r in rows:
    nl, t, ctx = r["layers"], r["T"], r["context"]
    heads = per["heads"]
    fl = 2.0 * t * heads * (ctx + t) * shape.latent
    x.append([nl, nl * t, nl * fl, nl * ctx, sum(r["local_distinct"])])
    y.append(r[TIME_KEYS[timing]] - head_s - dense_extra_s)
  x, y = np.asarray(x, float), np.asarray(y, float)
  scale = np.maximum(np.abs(x).max(axis=0), 1e-30)          # conditioning
  c = _nnls(x / scale, y) / scale
  pred = x @ c
  yt = y + head_s + dense_extra_s
  rmse = float(np.sqrt(np.mean((pred - y) ** 2)))
  max_rel = float(np.max(np.abs(pred - y) / yt))
  rate = per["expert_bytes"] / c[4] if c[4] > 0 else ceil
  return SliceFit(impl=impl, c_layer=float(c[0]), c_token=float(c[1]), c_attn_flop=float(c[2]), c_ctx=float(c[3]),
                  c_expert=float(c[4]), head_s=head_s, dense_extra_s=dense_extra_s, weight_rate=float(rate),
                  rmse_s=rmse, max_rel_err=max_rel, points=len(rows), timing=timing,
                  source=f"{doc.get('device', '?')}, {doc.get('date', '?')}")


@dataclasses.dataclass(frozen=True)
class CostModel:
  fit: SliceFit
  interconnect: Interconnect = NVLINK_H200
  shape: ModelShape = ModelShape()
  overhead_s: float = 0.0      # per round: tree build, walk, compaction (not in the slice)
  source: str = ""

  def target_s(self, t: int, ctx: int, experts_local: Optional[float] = None) -> float:
    f, s = self.fit, self.shape
    e = s.distinct_local_experts(t) if experts_local is None else experts_local
    return (f.head_s + f.dense_extra_s
            + s.layers * (f.c_layer + f.c_token * t + f.c_attn_flop * s.attn_flops(t, ctx) + f.c_ctx * ctx)
            + s.moe_layers * f.c_expert * e)

  def comm_s(self, t: int) -> float:
    return 2 * self.shape.layers * self.interconnect.allreduce_s(t * self.shape.hidden * 2)

  def drafter_s(self) -> float:
    s = self.shape
    return (s.drafter_bytes_per_gpu / self.fit.weight_rate
            + 2 * s.drafter_layers * self.interconnect.allreduce_s(s.drafter_block * s.hidden * 2))

  def round_s(self, mode: str, budget: int, ctx: int, experts_local: Optional[float] = None) -> float:
    """Seconds of one round: mode 'ar' (T=1, no drafter), 'dflash' (T=block), 'ddtree' (T=budget+1)."""
    if mode == "ar":
      t, draft = 1, 0.0
    elif mode == "dflash":
      t, draft = self.shape.drafter_block, self.drafter_s()
    elif mode == "ddtree":
      t, draft = budget + 1, self.drafter_s()
    else:
      raise ValueError(f"mode must be ar, dflash or ddtree, got {mode!r}")
    return self.target_s(t, ctx, experts_local) + self.comm_s(t) + draft + self.overhead_s

  def breakdown(self, mode: str, budget: int, ctx: int) -> dict:
    t = 1 if mode == "ar" else (self.shape.drafter_block if mode == "dflash" else budget + 1)
    f, s = self.fit, self.shape
    return dict(T=t, fixed=f.head_s + f.dense_extra_s + s.layers * (f.c_layer + f.c_token * t),
                attention=s.layers * (f.c_attn_flop * s.attn_flops(t, ctx) + f.c_ctx * ctx),
                experts=s.moe_layers * f.c_expert * s.distinct_local_experts(t),
                distinct_local_experts=s.distinct_local_experts(t), comm=self.comm_s(t),
                drafter=0.0 if mode == "ar" else self.drafter_s())

  def with_interconnect(self, name_or_ic) -> "CostModel":
    ic = INTERCONNECTS[name_or_ic] if isinstance(name_or_ic, str) else name_or_ic
    return dataclasses.replace(self, interconnect=ic)


def save(fits: Sequence[SliceFit], path: str, *, source: str, ceilings: dict) -> None:
  doc = dict(source=source, ceilings=ceilings, features=FEATURES,
             model=__doc__.split("\n\n")[1], fits={f.impl: dataclasses.asdict(f) for f in fits},
             interconnects={k: dataclasses.asdict(v) for k, v in INTERCONNECTS.items()})
  with open(path, "w") as fh:
    json.dump(doc, fh, indent=1)


def load(path: str = DEFAULT_PATH, impl: str = "pallas", interconnect: str = "nvlink") -> CostModel:
  """The cost model from a stored fit (configs/cost_h200.json by default)."""
  try:
    with open(path) as fh:
      doc = json.load(fh)
  except FileNotFoundError:
    raise FileNotFoundError(f"cost model: no fitted coefficients at {path} "
                            "(run benchmarks/k26_slice.py on the GPU, then benchmarks/k26_projection.py --refit)") from None
  if impl not in doc["fits"]:
    raise ValueError(f"cost model {path}: no fit for impl {impl!r}; has {sorted(doc['fits'])}")
  fit = SliceFit(**doc["fits"][impl])
  return CostModel(fit=fit, interconnect=INTERCONNECTS[interconnect], source=fit.source or doc.get("source", path))


def fit_from_bench(bench_json: str, out_path: str = DEFAULT_PATH) -> list[SliceFit]:
  """Refits every kernel path the slice JSON has enough rows for (fit_slice) and writes them to out_path; a path
  it cannot fit keeps its fit from out_path's previous contents, if any (each fit records its own source)."""
  with open(bench_json) as fh:
    doc = json.load(fh)
  name = os.path.basename(bench_json)
  fits = [dataclasses.replace(f, source=f"{name} ({f.source})")
          for f in (fit_slice(doc, impl) for impl in ("pallas", "xla")) if f is not None]
  if not fits:
    raise ValueError(f"cost model: {bench_json} has too few rows to fit any kernel path (need >= {len(FEATURES)} "
                     "rows of the model's layout over >= 3 token counts per path)")
  kept = []
  if os.path.exists(out_path):
    with open(out_path) as fh:
      old = json.load(fh)
    refitted = {f.impl for f in fits}
    kept = [SliceFit(**{"source": old.get("source", out_path), **v}) for k, v in old["fits"].items()
            if k not in refitted]
  save(fits + kept, out_path, source=f"{name} ({doc['device']}, {doc['date']})", ceilings=doc["ceilings"])
  return fits


def expected_tokens_per_s(expected_accept: float, round_s: float) -> float:
  return expected_accept / round_s if round_s > 0 else math.inf
