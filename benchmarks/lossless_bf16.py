"""Do dflash and ddtree reproduce AR token for token in bf16 on the embedded default model?

  PYTHONPATH=. python3 benchmarks/lossless_bf16.py [--prompts 16] [--max_new_tokens 96]

In fp32 the speculative modes are exact (tests/test_spec_lossless.py). In bf16 the AR step (T=1)
and the tree verify (T=N+1) reduce in different orders, so a near-tie in the target's argmax can
break differently; this script counts how often that happens on the test-split prompts.
"""
import argparse
import json

import jax
import jax.numpy as jnp

from ddtree_jax.cli.common import load_models
from ddtree_jax.engine import Engine


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--prompts", type=int, default=16)
  ap.add_argument("--max_new_tokens", type=int, default=96)
  ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
  a = ap.parse_args()
  dtype = jnp.bfloat16 if a.dtype == "bf16" else jnp.float32
  target, cfg, drafter, dcfg, tok, label = load_models(None, None, dtype, want_drafter=True)
  eng = Engine(target, cfg, drafter, dcfg)
  with open("benchmarks/prompts/test_prompts.jsonl") as f:
    prompts = [tok.encode(json.loads(line)["prompt"]) for line in f][:a.prompts]
  ar = eng.generate(prompts, mode="ar", max_new_tokens=a.max_new_tokens)
  print(f"{label}, {a.dtype}, {jax.devices()[0].device_kind}, {len(prompts)} prompts x {a.max_new_tokens} tokens")
  for mode, budget in (("dflash", 1), ("ddtree", 16), ("ddtree", 64)):
    res = eng.generate(prompts, mode=mode, budget=budget, max_new_tokens=a.max_new_tokens)
    same = sum(r.token_ids == x.token_ids for r, x in zip(res, ar))
    print(f"{mode:>6} budget {budget:>3}: {same}/{len(prompts)} outputs identical to AR")


if __name__ == "__main__":
  main()
