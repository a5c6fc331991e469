"""Peak host memory of `ddtree-convert` on a multi-shard synthetic K2.6-layout checkpoint.

Writes a synthetic INT4 checkpoint (real layout: nested text_config, packed experts, vision tensors,
several shards + index), then runs the converter in a child process and reads the child's peak RSS
(`getrusage(RUSAGE_CHILDREN).ru_maxrss`). A second child that only imports the same stack and converts
a tiny checkpoint gives the fixed baseline (Python + JAX + orbax). The claim to check: peak - baseline
stays near one shard (the converter holds one decoder layer at a time), far below the checkpoint size.

  PYTHONPATH=. python benchmarks/convert_memory.py [--layers 12 --experts 96 --shards 8]
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def child_peak_rss(cmd: list[str], env) -> tuple[int, float]:
  """Runs cmd in a fresh child (forked from a small helper so RUSAGE_CHILDREN covers only it)."""
  helper = ("import resource, subprocess, sys, time; t = time.time(); "
            "r = subprocess.run(sys.argv[1:]); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, time.time() - t, r.returncode)")
  out = subprocess.run([sys.executable, "-c", helper, *cmd], env=env, capture_output=True, text=True)
  last = out.stdout.strip().splitlines()[-1].split()
  if last[2] != "0":
    raise SystemExit(f"child failed: {out.stderr[-3000:]}")
  return int(last[0]) * 1024, float(last[1])


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--layers", type=int, default=12)
  ap.add_argument("--experts", type=int, default=96)
  ap.add_argument("--hidden", type=int, default=1024)
  ap.add_argument("--moe_intermediate", type=int, default=512)
  ap.add_argument("--vocab", type=int, default=32768)
  ap.add_argument("--shards", type=int, default=8)
  ap.add_argument("--workdir", default=None)
  args = ap.parse_args()

  from configs.tiny import tiny
  from ddtree_jax.checkpoint import synthetic
  from ddtree_jax.checkpoint.load import TargetReader

  cfg = tiny(vocab_size=args.vocab, hidden_size=args.hidden, num_hidden_layers=args.layers, num_attention_heads=8,
             q_lora_rank=256, kv_lora_rank=128, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32,
             intermediate_size=2 * args.hidden, moe_intermediate_size=args.moe_intermediate,
             n_routed_experts=args.experts, num_experts_per_tok=4, n_group=4, topk_group=2)
  work = args.workdir or tempfile.mkdtemp(prefix="convert_memory_")
  hf, out = os.path.join(work, "hf"), os.path.join(work, "out")
  tiny_hf, tiny_out = os.path.join(work, "tiny_hf"), os.path.join(work, "tiny_out")
  for p in (hf, out, tiny_hf, tiny_out):
    shutil.rmtree(p, ignore_errors=True)
  t = time.time()
  synthetic.write_target_checkpoint(hf, cfg, layout="k26", n_shards=args.shards, seed=0)
  synthetic.write_target_checkpoint(tiny_hf, tiny(), layout="k26", n_shards=2, seed=0)
  gen_s = time.time() - t

  r = TargetReader(hf)
  shard_sizes = sorted(os.path.getsize(f) for f in r.ckpt.shards)
  group_sizes = {g: sum(r.ckpt.tensors[s.name].nbytes for spec in specs for s in spec.sources + spec.checks)
                 for g, specs in r.groups.items()}
  total = sum(shard_sizes)

  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  conv = [sys.executable, "-m", "ddtree_jax.cli.convert", "--progress=false", "--dtype=bfloat16"]
  base_rss, _ = child_peak_rss(conv + [f"--hf_dir={tiny_hf}", f"--out_dir={tiny_out}"], env)
  peak_rss, conv_s = child_peak_rss(conv + [f"--hf_dir={hf}", f"--out_dir={out}"], env)

  mib = lambda n: n / 2**20
  print(f"checkpoint: {len(shard_sizes)} shards, {mib(total):.0f} MiB total; largest shard {mib(shard_sizes[-1]):.0f} MiB; "
        f"largest group {max(group_sizes, key=group_sizes.get)} {mib(max(group_sizes.values())):.0f} MiB "
        f"(generated in {gen_s:.0f} s)")
  print(f"baseline peak RSS (same CLI on a tiny checkpoint): {mib(base_rss):.0f} MiB")
  print(f"conversion peak RSS: {mib(peak_rss):.0f} MiB in {conv_s:.1f} s; above baseline: {mib(peak_rss - base_rss):.0f} MiB "
        f"= {(peak_rss - base_rss) / shard_sizes[-1]:.2f} x largest shard = {(peak_rss - base_rss) / total:.2f} x checkpoint")
  if not args.workdir:
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
  main()
