"""Broken checkpoints give one clear error naming the file and tensor, and leave no output directory."""
import json
import os
import re

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from configs.tiny import tiny
from ddtree_jax.checkpoint import CheckpointError, convert_checkpoint, load_target, orbax_io, synthetic
from ddtree_jax.checkpoint.safetensors_reader import INDEX_NAME, SafetensorsDir, write_safetensors

P = "language_model.model."


@pytest.fixture
def hf(tmp_path):
  return synthetic.write_target_checkpoint(str(tmp_path / "hf"), tiny(), layout="k26", n_shards=3, seed=5)


def shard_of(hf_dir, name):
  with open(os.path.join(hf_dir, INDEX_NAME)) as f:
    return os.path.join(hf_dir, json.load(f)["weight_map"][name])


def edit_shard(hf_dir, name, fn):
  """Rewrites the shard holding `name` with fn(tensors dict) applied; keeps the index in sync."""
  file = shard_of(hf_dir, name)
  ck = SafetensorsDir(hf_dir)
  tensors = {n: ck.read(n) for n, t in ck.tensors.items() if t.file == file}
  fn(tensors)
  write_safetensors(file, tensors)
  idx_path = os.path.join(hf_dir, INDEX_NAME)
  with open(idx_path) as f:
    idx = json.load(f)
  base = os.path.basename(file)
  idx["weight_map"] = {n: s for n, s in idx["weight_map"].items() if s != base}
  idx["weight_map"].update({n: base for n in tensors})
  with open(idx_path, "w") as f:
    json.dump(idx, f)
  return file


def expect_failure(hf_dir, tmp_path, *patterns, drafter_dir=None):
  out = str(tmp_path / "out")
  with pytest.raises(CheckpointError) as e:
    convert_checkpoint(hf_dir, out, drafter_dir=drafter_dir, dtype=jnp.float32)
  msg = str(e.value)
  for p in patterns:
    assert re.search(p, msg), f"{p!r} not in: {msg}"
  assert "\n" not in msg
  assert not os.path.exists(out)
  assert not [p for p in os.listdir(tmp_path) if p.startswith("out")], os.listdir(tmp_path)
  return msg


def test_missing_tensor(hf, tmp_path):
  name = P + "layers.1.self_attn.kv_b_proj.weight"
  edit_shard(hf, name, lambda t: t.pop(name))
  expect_failure(hf, tmp_path, "missing tensor", re.escape(name), re.escape(hf), "layers.1.self_attn.kv_b_proj.kernel")


def test_extra_unknown_tensor(hf, tmp_path):
  name = P + "layers.0.self_attn.q_a_proj.bias"
  file = edit_shard(hf, P + "layers.0.self_attn.q_a_proj.weight",
                    lambda t: t.__setitem__(name, np.zeros(32, ml_dtypes.bfloat16)))
  expect_failure(hf, tmp_path, "unknown tensor", re.escape(name), re.escape(os.path.basename(file)))


def test_wrong_prefix_hint(hf, tmp_path):
  name = P + "norm.weight"
  edit_shard(hf, name, lambda t: t.__setitem__("model.norm.weight", t.pop(name)))
  expect_failure(hf, tmp_path, "unknown tensor 'model.norm.weight'", "prefix")


def test_wrong_shape(hf, tmp_path):
  name = P + "layers.2.mlp.experts.5.up_proj.weight_scale"
  file = edit_shard(hf, name, lambda t: t.__setitem__(name, np.ones((32, 4), ml_dtypes.bfloat16)))
  expect_failure(hf, tmp_path, re.escape(os.path.basename(file)), re.escape(name), r"shape \[32, 4\]", r"expected \[32, 2\]")


def test_wrong_dtype(hf, tmp_path):
  name = P + "layers.1.mlp.experts.0.gate_proj.weight_packed"
  file = edit_shard(hf, name, lambda t: t.__setitem__(name, t[name].astype(np.float32)))
  expect_failure(hf, tmp_path, re.escape(os.path.basename(file)), re.escape(name), "dtype F32", "I32")


def test_wrong_weight_shape_contents_fails_mid_conversion(hf, tmp_path):
  # Only visible when the tensor is read, i.e. after the temporary output exists: it must be removed.
  name = P + "layers.2.mlp.experts.7.down_proj.weight_shape"
  edit_shard(hf, name, lambda t: t.__setitem__(name, np.array([64, 64], np.int32)))
  expect_failure(hf, tmp_path, re.escape(name), r"expected \[64, 32\]")


def test_truncated_shard(hf, tmp_path):
  file = shard_of(hf, P + "layers.1.input_layernorm.weight")
  size = os.path.getsize(file)
  with open(file, "r+b") as f:
    f.truncate(size - 100)
  expect_failure(hf, tmp_path, "truncated", re.escape(os.path.basename(file)), "tensor '")


def test_index_points_at_missing_file(hf, tmp_path):
  file = shard_of(hf, P + "norm.weight")
  os.remove(file)
  expect_failure(hf, tmp_path, re.escape(INDEX_NAME), "missing file", re.escape(os.path.basename(file)),
                 re.escape(P + "norm.weight") + "|e.g.")


def test_failure_while_writing_leaves_nothing(hf, tmp_path, monkeypatch):
  calls = []
  real = orbax_io.save_tree

  def flaky(directory, arrays):
    calls.append(directory)
    if len(calls) == 3:
      raise CheckpointError(f"{directory}: disk full (simulated)")
    return real(directory, arrays)
  monkeypatch.setattr(orbax_io, "save_tree", flaky)
  expect_failure(hf, tmp_path, "disk full")
  assert len(calls) == 3


def test_refuses_to_overwrite(hf, tmp_path):
  out = tmp_path / "out"
  out.mkdir()
  (out / "keep.txt").write_text("mine")
  with pytest.raises(CheckpointError, match="already exists"):
    convert_checkpoint(hf, str(out), dtype=jnp.float32)
  assert (out / "keep.txt").read_text() == "mine"
  convert_checkpoint(hf, str(out), dtype=jnp.float32, overwrite=True)
  assert not (out / "keep.txt").exists() and orbax_io.is_converted(str(out))
  assert sorted(os.listdir(tmp_path)) == ["hf", "out"]


@pytest.mark.parametrize("change,patterns", [
    (dict(hidden_size=96), ["hidden_size", "96", "64"]),
    (dict(vocab_size=300), ["vocab_size", "300", "256"]),
    (dict(target_layer_ids=(0, 3)), ["target_layer_ids", r"\[3\]", "3 layers|\\[0, 3\\)"]),
])
def test_drafter_does_not_fit(hf, tmp_path, change, patterns):
  dcfg = synthetic.tiny_drafter_config(tiny(), **change)
  dr = synthetic.write_drafter_checkpoint(str(tmp_path / "drafter"), dcfg)
  msg = expect_failure(hf, tmp_path, *patterns, drafter_dir=dr)
  assert "config.json" in msg


def test_drafter_fc_does_not_match_layer_ids(hf, tmp_path):
  dcfg = synthetic.tiny_drafter_config(tiny(), target_layer_ids=(0, 1, 2))
  dr = synthetic.write_drafter_checkpoint(str(tmp_path / "drafter"), dcfg)
  with open(os.path.join(dr, "config.json")) as f:
    c = json.load(f)
  c["dflash_config"]["target_layer_ids"] = [0, 2]
  with open(os.path.join(dr, "config.json"), "w") as f:
    json.dump(c, f)
  expect_failure(hf, tmp_path, "fc.weight", r"3 target feature layers", drafter_dir=dr)


def test_load_target_reports_the_same_errors(hf):
  name = P + "layers.1.self_attn.o_proj.weight"
  edit_shard(hf, name, lambda t: t.pop(name))
  with pytest.raises(CheckpointError, match=re.escape(name)):
    load_target(hf, dtype=jnp.float32)


def test_expert_storage_mismatch_hint(tmp_path):
  hf = synthetic.write_target_checkpoint(str(tmp_path / "hf"), tiny(), layout="k2", n_shards=2)
  with open(os.path.join(hf, "config.json")) as f:
    c = json.load(f)
  del c["quantization_config"]                    # says bf16 experts, files hold INT4
  with open(os.path.join(hf, "config.json"), "w") as f:
    json.dump(c, f)
  expect_failure(hf, tmp_path, "unknown tensor 'model.layers.1.mlp.experts.0.gate_proj.weight_packed'",
                 "expert storage")
