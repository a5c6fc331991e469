"""Issue 10: the sharded engine on several real GPUs (one call per machine kind).

  PYTHONPATH=. python3 benchmarks/multi_gpu.py --out $OUT/multi_gpu.json            # all visible GPUs
  XLA_FLAGS=--xla_force_host_platform_device_count=8 PYTHONPATH=. python3 benchmarks/multi_gpu.py --smoke

Part 1: the embedded default model on meshes over all devices (1xN, and Nx1 / 2x(N/2) for a batch),
tokens compared with one device in ar / dflash / ddtree at T=0 (fp32, so identity is exact).
Part 2: K2.6 at `--layers` depth (61 = full) with random weights in the real formats (INT4 experts,
bf16 rest), initialised directly into their shards (no full copy on one device), over a 1xN mesh:
the compiled round's median time for AR and DDTree at each budget, contexts 4K and 32K (a random
prompt of that length is prefilled once per context). With random weights the drafter is useless
(tau ~1), so the figure is time per round; time per output token = round time / tau(N), with tau from
benchmarks/RESULTS.md (embedded model or the paper's curve), next to SGLang's 9.22 ms/token.
Collective time is not separated here (no profiler in this script): compare the 1xN round times with the
one-GPU slice (benchmarks/k26_slice.py) plus the cost model's all-reduce term (ddtree_jax/cost_model.py).
--smoke: tiny sizes, runs on 8 virtual CPU devices in about two minutes (checked 2026-12-02: part 1 all identical).
"""
import argparse
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx


def part1_embedded(smoke: bool, modes=("ar", "dflash", "ddtree")):
  from ddtree_jax import sharding
  from ddtree_jax.cli.common import load_models, random_models
  from ddtree_jax.engine import Engine
  n = jax.device_count()
  if smoke:
    from configs.tiny import tiny_shardable, tiny_shardable_drafter
    from ddtree_jax.model.deepseek import DeepseekV3
    from ddtree_jax.model.dflash import DFlashDrafter
    cfg = tiny_shardable(stop_token_ids=())
    dcfg = tiny_shardable_drafter(cfg)
    make = lambda: (DeepseekV3(cfg, dtype=jnp.float32, rngs=nnx.Rngs(0)),
                    DFlashDrafter(dcfg, dtype=jnp.float32, rngs=nnx.Rngs(1)))
    prompts = [[5, 6, 7, 8], [9, 10, 11], [12, 13], [14, 15, 16, 17, 18]] * 2
  else:
    def make():
      t, _, d, _, _, _ = load_models(None, None, jnp.float32, want_drafter=True)
      return t, d
    t, cfg, d, dcfg, tok, _ = load_models(None, None, jnp.float32, want_drafter=True)
    with open("benchmarks/prompts/test_prompts.jsonl") as f:
      prompts = [tok.encode(json.loads(line)["prompt"]) for line in f][:8]
  meshes = [f"1x{n}", f"{n}x1"] + ([f"2x{n // 2}"] if n >= 4 and n % 2 == 0 else [])
  t, d = make()
  one = Engine(t, cfg, d, dcfg)
  rows = []
  for mode, budget in [(m, 16 if m == "ddtree" else 1) for m in modes]:
    ref = [r.token_ids for r in one.generate(prompts, mode=mode, budget=budget, max_new_tokens=32)]
    for m in meshes:
      t, d = make()
      eng = Engine(t, cfg, d, dcfg, mesh=sharding.make_mesh(m))
      got = [r.token_ids for r in eng.generate(prompts, mode=mode, budget=budget, max_new_tokens=32)]
      rows.append({"mode": mode, "mesh": m, "identical_to_one_device": got == ref})
      print(rows[-1], flush=True)
  return rows


def k26_sharded(cfg, mesh, dtype):
  """A DeepseekV3 of `cfg` with random weights created directly in their shards."""
  from ddtree_jax import sharding
  from ddtree_jax.model.deepseek import DeepseekV3
  graph, abstract = nnx.split(nnx.eval_shape(lambda: DeepseekV3(cfg, dtype=dtype, rngs=nnx.Rngs(0))))
  shardings = sharding.module_state_shardings(abstract, sharding.target_rule(mesh, cfg))
  state = jax.jit(lambda: nnx.split(DeepseekV3(cfg, dtype=dtype, rngs=nnx.Rngs(0)))[1],
                  out_shardings=shardings)()
  return nnx.merge(graph, state)


def part2_k26(smoke: bool, layers: int, budgets, contexts, reps: int):
  from ddtree_jax import sharding
  from ddtree_jax.engine import Engine
  from ddtree_jax.model.dflash import DFlashDrafter
  from ddtree_jax.plan import k26_drafter
  if smoke:
    from configs.tiny import tiny_shardable, tiny_shardable_drafter
    cfg = tiny_shardable(stop_token_ids=())
    dcfg = tiny_shardable_drafter(cfg)
    dtype = jnp.float32
  else:
    from configs.kimi_k2_6 import kimi_k2_6
    cfg = kimi_k2_6().replace(num_hidden_layers=layers, stop_token_ids=())
    dcfg = k26_drafter(cfg).replace(target_layer_ids=tuple(min(i, layers - 1) for i in k26_drafter(cfg).target_layer_ids),
                                    num_target_layers=layers)
    dtype = jnp.bfloat16
  mesh = sharding.make_mesh(f"1x{jax.device_count()}")
  target = k26_sharded(cfg, mesh, dtype)
  drafter = DFlashDrafter(dcfg, dtype=dtype, rngs=nnx.Rngs(1))
  eng = Engine(target, cfg, drafter, dcfg, mesh=mesh)
  rng = np.random.default_rng(0)
  rows = []
  for ctx in contexts:
    prompt = rng.integers(2, cfg.vocab_size - 1, size=ctx).tolist()
    for mode, budget in [("ar", 1)] + [("ddtree", b) for b in budgets]:
      # The engine times prefill + rounds with compilation excluded (GenerationResult.tokens_per_s); a
      # one-token run (prefill only) gives the prefill's share, the rest divided by the rounds is a round.
      r = eng.generate([prompt], mode=mode, budget=budget, max_new_tokens=reps + 1, stop_ids=[])[0]
      p1 = eng.generate([prompt], mode=mode, budget=budget, max_new_tokens=1, stop_ids=[])[0]
      total_s = len(r.token_ids) / r.tokens_per_s
      prefill_s = len(p1.token_ids) / p1.tokens_per_s
      round_ms = max(total_s - prefill_s, 0.0) / max(r.rounds, 1) * 1e3
      rows.append({"context": ctx, "mode": mode, "budget": budget, "rounds": r.rounds, "tau": r.tau,
                   "round_ms": round_ms, "layers": cfg.num_hidden_layers})
      print(rows[-1], flush=True)
  return rows


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--smoke", action="store_true")
  ap.add_argument("--layers", type=int, default=61)
  ap.add_argument("--budgets", default="8,16,32,64,128")
  ap.add_argument("--contexts", default="4096,32768")
  ap.add_argument("--reps", type=int, default=20)
  ap.add_argument("--parts", default="1,2", help="which parts to run: 1 (tokens vs one device), 2 (K2.6 rounds)")
  ap.add_argument("--part1_modes", default="ar,dflash,ddtree", help="part 1's modes (a short call: e.g. ar,ddtree)")
  ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "multi_gpu.json"))
  a = ap.parse_args()
  budgets = [int(x) for x in a.budgets.split(",")]
  contexts = [int(x) for x in a.contexts.split(",")]
  if a.smoke:
    budgets, contexts, reps = [4, 8], [16], 3
  else:
    reps = a.reps
  print(f"{jax.device_count()} x {jax.devices()[0].device_kind}", flush=True)
  parts = {int(p) for p in a.parts.split(",") if p}
  modes = [m for m in a.part1_modes.split(",") if m]
  out = {"devices": jax.device_count(), "device_kind": jax.devices()[0].device_kind,
         "part1_embedded": part1_embedded(a.smoke, modes) if 1 in parts else [],
         "part2_k26": part2_k26(a.smoke, a.layers, budgets, contexts, reps) if 2 in parts else []}
  with open(a.out, "w") as f:
    json.dump(out, f, indent=1)
  print(f"wrote {a.out}")
  if out["part1_embedded"]:
    ok = all(r["identical_to_one_device"] for r in out["part1_embedded"])
    print(f"part 1: {'all identical' if ok else 'MISMATCH'}")
  for r in out["part2_k26"]:
    print(f"ctx {r['context']:>6} {r['mode']:>6} N={r['budget']:>4}: {r['round_ms']:8.2f} ms/round")


if __name__ == "__main__":
  main()
