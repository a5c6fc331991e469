"""Which XLA kernels run around the MoE dispatch's custom calls: the GPU-optimised HLO of one call (GPU only).

Round 32's traces (H100) show two XLA kernels before the few-token MoE kernels (0.9 + 1.3 us at 1 token); alone,
the activation planes are one fusion (planes_forms.py), so one of the two is something else. This compiles
custom_calls.moe_int4.routed_experts_int4(impl="pallas") at each token count, with the expert offset a literal (as
one GPU's whole model) and traced (as under shard_map, where it is axis_index * E), writes each optimised module
to --out, and prints the entry computation's instructions with every fusion's body, so each kernel in a trace can
be named by what it computes. Round 34 (H100): the other kernel was the two-word constants array [offset, MAGIC]
(benchmarks/RESULTS.md), now made with the planes in one array (custom_calls/moe_int4/planes_consts.py).

  python3 benchmarks/dispatch_hlo.py --tokens 1,4 --k_chunk 256 --out $OUT/dispatch_hlo.txt
"""
from __future__ import annotations

import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

D, INTER, LOCAL_EXPERTS = 7168, 2048, 48          # the K2.6 per-GPU expert shard


def computations(hlo: str):
  """{name: body lines} of every computation in an HLO module's text, and the entry computation's name."""
  comps, entry, name = {}, None, None
  for line in hlo.splitlines():
    m = re.match(r"^(ENTRY )?%?([\w.\-]+) .*\{$", line)
    if m:
      name = m.group(2)
      comps[name] = []
      entry = name if m.group(1) else entry
    elif line.startswith("}"):
      name = None
    elif name:
      comps[name].append(line.strip())
  return comps, entry


def kernels_summary(hlo: str) -> str:
  """The entry computation, each fusion followed by its fused computation's body (indented)."""
  comps, entry = computations(hlo)
  out = []
  for line in comps.get(entry, []):
    out.append(re.sub(r", metadata=\{[^}]*\}|backend_config=\{.*\}|, ir=\"[^\"]*\"", "", line)[:400])
    m = re.search(r"calls=%?([\w.\-]+)", line)
    if m and "fusion(" in line and m.group(1) in comps:
      out += ["      " + re.sub(r", metadata=\{[^}]*\}", "", x)[:300] for x in comps[m.group(1)]]
  return "\n".join(out)


def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--tokens", default="1,4")
  ap.add_argument("--k_chunk", type=int, default=256, help="k-chunk the experts (0: the stored layout)")
  ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "dispatch_hlo.txt"))
  args = ap.parse_args()
  import jax
  import jax.numpy as jnp
  import kernels as kb
  from custom_calls import moe_int4
  if jax.default_backend() != "gpu":
    raise SystemExit("dispatch_hlo.py: the optimised HLO of the Triton custom calls needs a GPU backend")
  sections = []
  for n in [int(t) for t in args.tokens.split(",") if t]:
    x, ids, w, *experts = kb.moe_inputs(300 + n, n, LOCAL_EXPERTS, D, INTER)
    if args.k_chunk:
      experts = list(moe_int4.experts_to_k_chunks(tuple(experts), args.k_chunk))
    literal = lambda x, ids, w, *ex: moe_int4.routed_experts_int4(x, ids, w, *ex, expert_offset=0, impl="pallas")
    traced = lambda off, x, ids, w, *ex: moe_int4.routed_experts_int4(x, ids, w, *ex, expert_offset=off,
                                                                      impl="pallas")
    for label, fn, call_args in (("literal offset", literal, (x, ids, w, *experts)),
                                 ("traced offset", traced, (jnp.int32(0), x, ids, w, *experts))):
      hlo = jax.jit(fn).lower(*call_args).compile().as_text()
      title = f"tokens {n}, k_chunk {args.k_chunk}, {label}"
      summary = kernels_summary(hlo)
      print(f"== {title}\n{summary}\n", flush=True)
      sections.append(f"==== {title}: summary\n{summary}\n\n==== {title}: whole module\n{hlo}\n")
  with open(args.out, "w") as f:
    f.write("\n".join(sections))


if __name__ == "__main__":
  main()
