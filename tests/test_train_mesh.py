"""The trainers data parallel on 8 virtual CPU devices (one subprocess; this file is the worker): a few
fp32 steps of the tiny target preset on a 4x2 mesh (batch over 4, parameters split over 2 by the rules),
interrupted and resumed from its orbax checkpoint, then exported, give the losses of one device; the
tiny drafter preset on 8x1 likewise. And the CLIs refuse a bad --mesh and a --batch the data axis does
not divide, naming the flag."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env(n_devices: int):
  return dict(os.environ, JAX_PLATFORMS="cpu",
              XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={n_devices}").strip(),
              PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))


@pytest.fixture(scope="module")
def eight_devices(tmp_path_factory):
  wd = tmp_path_factory.mktemp("train_mesh")
  r = subprocess.run([sys.executable, os.path.abspath(__file__), str(wd)], env=_env(8), capture_output=True,
                     text=True, timeout=1200, cwd=ROOT)
  assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
  line = [l for l in r.stdout.splitlines() if l.startswith("RESULT ")][-1]
  return json.loads(line[len("RESULT "):]), wd


@pytest.mark.e2e
def test_target_on_4x2_resumed_matches_one_device(eight_devices):
  res, wd = eight_devices
  one, mesh = res["target"]["one"], res["target"]["mesh"]
  assert len(one["loss"]) == len(mesh["loss"]) == 4
  np.testing.assert_allclose(mesh["loss"], one["loss"], rtol=1e-4)
  assert mesh["val_step"][-1] == one["val_step"][-1] == 4
  np.testing.assert_allclose(mesh["val_loss"][-1], one["val_loss"][-1], rtol=1e-4)
  d = res["target"]["param_diff"]
  assert d["mean"] < 1e-5 and d["max"] < 1e-2, d
  # Restored in their shards: lm_head split over "model", Adam's moments like their parameters.
  assert res["target"]["specs"]["lm_head.kernel"] == [None, "model"], res["target"]["specs"]
  assert res["target"]["specs"]["mu:lm_head.kernel"] == [None, "model"], res["target"]["specs"]
  # The same outputs as on one device: history JSON, loss PNG, the INT4 export and its summary.
  assert os.path.exists(os.path.join(wd, "mesh", "target", "target_loss.png"))
  assert json.load(open(os.path.join(wd, "mesh", "export", "target", "config.json")))["quantization_config"]
  assert np.isfinite(res["target"]["summary"]["val_loss_int4"]) and res["target"]["summary"]["export_bytes"] > 0


@pytest.mark.e2e
def test_drafter_on_8x1_matches_one_device(eight_devices):
  res, wd = eight_devices
  one, mesh = res["drafter"]["one"], res["drafter"]["mesh"]
  assert len(one["loss"]) == len(mesh["loss"]) == 3
  np.testing.assert_allclose(mesh["loss"], one["loss"], rtol=1e-4)
  np.testing.assert_allclose(mesh["tau_est"], one["tau_est"], rtol=1e-4)
  np.testing.assert_allclose(mesh["val_loss"], one["val_loss"], rtol=1e-4)
  d = res["drafter"]["param_diff"]
  assert d["mean"] < 1e-5 and d["max"] < 1e-2, d
  assert os.path.exists(os.path.join(wd, "drafter_mesh", "drafter_history.json"))


@pytest.mark.parametrize("cli,args,needles", [
    ("train_target", ["--mesh=3x3"], ["--mesh='3x3'", "needs 9 devices"]),
    ("train_target", ["--preset=tiny"], ["--batch=4 (the tiny preset's", "8x1"]),     # default: 8 x 1
    ("train_target", ["--mesh=4x2", "--batch=6"], ["--batch=6:", "4x2", "multiple of 4"]),
    ("train_drafter", ["--mesh=eight", "--target_dir=/nonexistent"], ["--mesh='eight'", "DATAxMODEL"]),
    ("train_drafter", ["--mesh=2x4", "--batch=3", "--target_dir=/nonexistent"], ["--batch=3:", "2x4"]),
])
def test_cli_refuses_bad_mesh_and_batch(tmp_path, cli, args, needles):
  r = subprocess.run([sys.executable, "-m", f"ddtree_jax.cli.{cli}", f"--workdir={tmp_path}", *args], env=_env(8),
                     capture_output=True, text=True, timeout=300, cwd=ROOT)
  assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-3000:]
  for n in needles:
    assert n in r.stderr, (n, r.stderr[-2000:])
  assert not os.path.exists(tmp_path / "tokenizer.json")     # refused before any work


# ---- the worker (8 virtual devices) ----------------------------------------------------------------

def _param_diff(a: dict, b: dict) -> dict:
  """Mean and max |a - b| over all parameters (Adam can turn a near-zero gradient's reduction-order
  noise into a full-size step of one element, so the max only gets a loose bound)."""
  from ddtree_jax.train.data_parallel import to_host
  a, b = to_host(a), to_host(b)
  d = np.concatenate([np.abs(a[k] - b[k]).ravel() for k in a])
  return {"mean": float(d.mean()), "max": float(d.max())}


def _main(wd: str):
  import dataclasses

  import jax
  import jax.numpy as jnp

  from configs import default_model as dm
  from ddtree_jax import sharding
  from ddtree_jax.train import common, data_parallel, gen_data, pipeline
  from ddtree_jax.train.drafter_trainer import train_drafter
  from ddtree_jax.train.target_trainer import target_template, train_target

  assert jax.device_count() == 8
  quiet = lambda s: None
  f32 = jnp.float32
  data = pipeline.prepare_corpus(os.path.join(wd, "corpus"), 320, max_files=4, log=quiet)
  train, val = data["streams"]["train"], data["streams"]["val"]
  cfg = dm.tiny_target_config(data["tokenizer"].vocab_size)        # the tiny preset: 2 heads, 4 experts
  hp = dataclasses.replace(dm.tiny_target_train(), seq_len=32, max_steps=4, eval_every=4, ckpt_every=2,
                           eval_tokens=256)                        # the preset's batch 4: 1 per data group
  out = {}

  # Target: one device (4 steps) vs 4x2 (2 steps, then resumed from the orbax checkpoint to 4).
  one = train_target(cfg, hp, train, val, os.path.join(wd, "one", "target"), progress=False, log=quiet,
                     compute_dtype=f32)
  mesh = sharding.make_mesh("4x2")
  tdir = os.path.join(wd, "mesh", "target")
  train_target(cfg, dataclasses.replace(hp, max_steps=2), train, val, tdir, progress=False, log=quiet, mesh=mesh,
               compute_dtype=f32)
  res = train_target(cfg, hp, train, val, tdir, resume=True, progress=False, log=quiet, mesh=mesh, compute_dtype=f32)
  hist = json.load(open(os.path.join(tdir, "target_history.json")))
  # A restore lands in the shards of the state it is given (lm_head split over "model", Adam's moments too).
  params = target_template(cfg).init(0)
  like, _ = data_parallel.place_state({"params": params, "opt": common.adamw(0.1, 1.0).init(params)}, mesh,
                                      sharding.TARGET_RULES, cfg)
  ck = common.Checkpointer(os.path.join(tdir, "orbax"))
  restored, meta = ck.restore(like)
  ck.close()
  spec = lambda a: list(a.sharding.spec) + [None] * (a.ndim - len(a.sharding.spec))
  specs = {"lm_head.kernel": spec(restored["params"]["lm_head.kernel"]),
           "mu:lm_head.kernel": spec(restored["opt"][1].mu["lm_head.kernel"])}
  assert meta["step"] == 4
  # The pipeline on the mesh: the finished run restored (no step left), INT4 evaluation on the mesh, export.
  summary = pipeline.train_and_export_target(cfg, hp, data, os.path.join(wd, "mesh"),
                                             os.path.join(wd, "mesh", "export", "target"), resume=True,
                                             progress=False, log=quiet, mesh=mesh)
  out["target"] = {"one": one.history, "mesh": hist, "specs": specs, "summary": summary,
                   "param_diff": _param_diff(one.params, res.params)}
  print("target done", flush=True)

  # Drafter against the (frozen, dense) initial target: one device vs 8x1, batch 8.
  tparams = {k: np.asarray(v) for k, v in target_template(cfg).init(0).items()}
  dcfg = dm.tiny_drafter_config(cfg)
  dhp = dataclasses.replace(dm.tiny_drafter_train(), seq_len=48, batch=8, blocks_per_seq=3, max_steps=3,
                            eval_every=3, ckpt_every=3)
  seqs = [(train[i * 40:i * 40 + 40].tolist(), 8) for i in range(12)]
  packed = gen_data.pack(seqs, dhp.seq_len, cfg.eos_token_id)
  tr, va = tuple(a[:9] for a in packed), tuple(a[9:] for a in packed)   # 3 val sequences: a replicated batch
  runs = {}
  for name, m in (("one", None), ("mesh", sharding.make_mesh("8x1"))):
    runs[name] = train_drafter(cfg, tparams, dcfg, dhp, tr, os.path.join(wd, f"drafter_{name}"), val_data=va,
                               progress=False, log=quiet, mesh=m, compute_dtype=f32)
  out["drafter"] = {"one": runs["one"].history, "mesh": runs["mesh"].history,
                    "param_diff": _param_diff(runs["one"].params, runs["mesh"].params)}
  print("RESULT " + json.dumps(out, default=float), flush=True)


if __name__ == "__main__":
  sys.path.insert(0, ROOT)
  _main(sys.argv[1])
