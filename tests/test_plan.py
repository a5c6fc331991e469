"""ddtree-plan and the engine's memory check: K2.6 numbers, refusal with advice, the CLI."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def k26():
  from configs.kimi_k2_6 import kimi_k2_6
  from ddtree_jax.plan import k26_drafter
  cfg = kimi_k2_6()
  return cfg, k26_drafter(cfg)


def test_k26_on_8_h200(k26):
  from ddtree_jax import plan
  cfg, dcfg = k26
  p = plan.make_plan(cfg, (1, 8), context=32768, budget=32, dcfg=dcfg, prompt_len=4096, device_bytes=141 * 10**9)
  assert p.cache_bytes_per_token == 70272                       # REFERENCE.md: 61 x 1152 B
  assert p.target_cache == 32768 * 70272                        # replicated: the full cache on every device
  assert 74e9 < p.weights < 78e9                                # ~594 GB / 8 + replicated projections
  assert p.fits


def test_refusal_says_what_to_change(k26):
  from ddtree_jax import plan
  cfg, dcfg = k26
  one_shot = dict(context=131072, budget=32, dcfg=dcfg, prompt_len=4096, device_bytes=96 * 10**9)
  p = plan.make_plan(cfg, (1, 8), **one_shot)          # the whole 4K prompt in one forward
  assert not p.fits and p.prefill_chunk == 4096
  msg = plan.advice(p, cfg, dcfg=dcfg)
  assert "--context <=" in msg and "--prefill_chunk <=" in msg and "one-shot prefill" in msg
  # The advice is right: the largest context and the largest chunk it names fit.
  ctx = int(msg.split("--context <= ")[1].split()[0].rstrip(";").replace(",", ""))
  assert plan.make_plan(cfg, (1, 8), **{**one_shot, "context": ctx}).fits
  chunk = int(msg.split("--prefill_chunk <= ")[1].split()[0].replace(",", ""))
  assert plan.make_plan(cfg, (1, 8), **one_shot, prefill_chunk=chunk).fits
  assert not plan.make_plan(cfg, (1, 8), **one_shot, prefill_chunk=chunk + 1).fits
  # Weights that cannot fit at all: more devices.
  p4 = plan.make_plan(cfg, (1, 4), context=1024, dcfg=dcfg, device_bytes=96 * 10**9)
  assert "more devices" in plan.advice(p4, cfg, dcfg=dcfg)


def test_chunked_prefill_fits_128k_on_96gb(k26):
  """The prefill's activations are those of one chunk: K2.6 at a 128K context on 8 x 96 GB fits with the
  default chunk of 512 tokens, for a 4K prompt and for a prompt that fills the context, and not in one forward."""
  from ddtree_jax import plan
  from ddtree_jax.spec.prefill import DEFAULT_CHUNK
  cfg, dcfg = k26
  kw = dict(context=131072, budget=32, dcfg=dcfg, device_bytes=96 * 10**9)
  p = plan.make_plan(cfg, (1, 8), prompt_len=4096, prefill_chunk=DEFAULT_CHUNK, **kw)
  full = plan.make_plan(cfg, (1, 8), prompt_len=131072, prefill_chunk=DEFAULT_CHUNK, **kw)
  one_shot = plan.make_plan(cfg, (1, 8), prompt_len=4096, **kw)
  assert p.fits and full.fits and not one_shot.fits
  assert p.act_prefill == full.act_prefill < one_shot.act_prefill / 5   # independent of the prompt's length
  assert p.prefill_chunk == 512 and "in 8 chunks of 512" in p.lines()[0]
  # A chunk of 1024 does not fit beside the 128K cache; the advice names a chunk that does.
  big = plan.make_plan(cfg, (1, 8), prompt_len=4096, prefill_chunk=1024, **kw)
  assert not big.fits and "--prefill_chunk <= " in plan.advice(big, cfg, dcfg=dcfg)
  # A chunk longer than the prompt is the one-shot prefill.
  assert plan.make_plan(cfg, (1, 8), prompt_len=300, prefill_chunk=512, **kw).prefill_chunk == 300
  with pytest.raises(plan.PlanError, match="prefill_chunk=-1"):
    plan.make_plan(cfg, (1, 8), prompt_len=4096, prefill_chunk=-1, **kw)


def test_data_axis_splits_cache_not_weights(k26):
  from ddtree_jax import plan
  cfg, _ = k26
  a = plan.make_plan(cfg, (2, 4), context=8192, batch=4, target_weights=0, drafter_weights=0)
  b = plan.make_plan(cfg, (1, 8), context=8192, batch=4, target_weights=0, drafter_weights=0)
  assert a.target_cache * 2 == b.target_cache


def test_engine_refuses_before_allocating():
  import jax.numpy as jnp
  from flax import nnx
  from configs.tiny import tiny
  from ddtree_jax import plan
  from ddtree_jax.engine import Engine
  from ddtree_jax.model.deepseek import DeepseekV3
  cfg = tiny()
  eng = Engine(DeepseekV3(cfg, dtype=jnp.float32, rngs=nnx.Rngs(0)), cfg)
  ok = plan.check_engine(eng, batch=1, capacity=256, prompt_tokens=16, budget=0, device_bytes=10**9)
  assert ok.fits
  with pytest.raises(plan.PlanError, match="change one of"):
    plan.check_engine(eng, batch=1, capacity=256, prompt_tokens=16, budget=0, device_bytes=10**5)


@pytest.mark.e2e
def test_cli_exit_codes():
  env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), JAX_PLATFORMS="cpu")
  run = lambda *a: subprocess.run([sys.executable, "-m", "ddtree_jax.cli.plan", *a], env=env, capture_output=True,
                                  text=True, timeout=120)
  r = run("--config=kimi_k2_6", "--mesh=1x8", "--device_memory_gb=141", "--context=32K")
  assert r.returncode == 0, r.stderr[-2000:]
  assert "70,272 B/token" in r.stdout and "fits" in r.stdout
  r = run("--config=kimi_k2_6", "--mesh=1x8", "--device_memory_gb=96", "--context=128K")   # chunks of 512
  assert r.returncode == 0 and "in 8 chunks of 512" in r.stdout, r.stderr[-2000:]
  r = run("--config=kimi_k2_6", "--mesh=1x8", "--device_memory_gb=96", "--context=128K", "--prefill_chunk=0")
  assert r.returncode == 1 and "change one of: --prefill_chunk <=" in r.stderr
  r = run("--config=kimi_k2_6", "--mesh=1x8", "--prefill_chunk=-2")
  assert r.returncode == 2 and "--prefill_chunk=-2: must be >= 0" in r.stderr
  r = run("--mesh=3y", "--device_memory_gb=96")
  assert r.returncode == 2 and "DATAxMODEL" in r.stderr
