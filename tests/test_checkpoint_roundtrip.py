"""HF directory -> model logits == HF -> orbax (ddtree-convert) -> restored model logits,
on one device and (in a subprocess) on 8 virtual CPU devices; synthetic checkpoints in the real layouts."""
import functools
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from configs.tiny import tiny
from ddtree_jax.cache import init_latent_cache
from ddtree_jax.checkpoint import (TargetReader, convert_checkpoint, is_converted, load_drafter, load_target,
                                   read_drafter, synthetic)
from ddtree_jax.checkpoint.safetensors_reader import SafetensorsDir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@functools.partial(jax.jit, static_argnums=(0, 2))
def _logits(graphdef, state, cfg, ids):
  b, t = ids.shape
  pos = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
  cache = init_latent_cache(cfg.num_hidden_layers, b, t, cfg.kv_lora_rank, cfg.qk_rope_head_dim, jnp.float32)
  mask = jnp.broadcast_to(jnp.tril(jnp.ones((t, t), bool)), (b, t, t))
  return nnx.merge(graphdef, state)(ids, pos, cache, mask).logits


def logits_of(model, cfg, seed=0, t=7, b=2):
  """One compiled forward per (model structure, config): models with equal graphdefs share it."""
  ids = jax.random.randint(jax.random.key(seed), (b, t), 0, cfg.vocab_size, jnp.int32)
  graphdef, state = nnx.split(model)
  return np.asarray(_logits(graphdef, state, cfg, ids))


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
  d = tmp_path_factory.mktemp("ckpt")
  cfg = tiny()
  k26 = synthetic.write_target_checkpoint(str(d / "k26"), cfg, layout="k26", n_shards=3, seed=1)
  k2 = synthetic.write_target_checkpoint(str(d / "k2"), tiny(int4=False), layout="k2", n_shards=2, seed=2)
  dr = synthetic.write_drafter_checkpoint(str(d / "drafter"), synthetic.tiny_drafter_config(cfg), seed=3)
  return dict(dir=d, cfg=cfg, k26=k26, k2=k2, drafter=dr)


def test_synthetic_k26_layout_is_the_real_one(ckpts):
  with open(os.path.join(ckpts["k26"], "config.json")) as f:
    c = json.load(f)
  assert c["architectures"] == ["KimiK25ForConditionalGeneration"]
  assert c["text_config"]["architectures"] == ["DeepseekV3ForCausalLM"]
  q = c["text_config"]["quantization_config"]
  assert (q["quant_method"], q["format"]) == ("compressed-tensors", "pack-quantized")
  ck = SafetensorsDir(ckpts["k26"])
  assert len(ck.shards) == 3 and os.path.exists(os.path.join(ckpts["k26"], "model.safetensors.index.json"))
  e = "language_model.model.layers.1.mlp.experts.3.down_proj."
  assert (ck.tensors[e + "weight_packed"].dtype, ck.tensors[e + "weight_packed"].shape) == ("I32", (64, 4))
  assert (ck.tensors[e + "weight_scale"].dtype, ck.tensors[e + "weight_scale"].shape) == ("BF16", (64, 1))
  assert ck.read(e + "weight_shape").tolist() == [64, 32]
  assert ck.tensors["language_model.model.layers.1.mlp.gate.e_score_correction_bias"].dtype == "F32"
  assert ck.tensors["language_model.lm_head.weight"].dtype == "BF16"
  assert any(n.startswith("vision_tower.") for n in ck.tensors) and any(n.startswith("mm_projector.") for n in ck.tensors)


def test_vision_tower_skipped_with_summary(ckpts):
  r = TargetReader(ckpts["k26"])
  assert r.cfg.tensor_prefix == "language_model.model."
  line = r.skipped.line()
  assert line.startswith("skipped vision tower/projector 7 tensors") and "\n" not in line
  assert TargetReader(ckpts["k2"]).skipped.line() == "skipped no tensors"


def test_int4_experts_stay_packed(ckpts):
  model, cfg = load_target(ckpts["k26"], dtype=jnp.float32)
  ck = SafetensorsDir(ckpts["k26"])
  ex = model.layers[2].mlp.experts
  for w in ("gate", "up", "down"):
    packed = np.stack([ck.read(f"language_model.model.layers.2.mlp.experts.{e}.{w}_proj.weight_packed") for e in range(8)])
    scale = np.stack([ck.read(f"language_model.model.layers.2.mlp.experts.{e}.{w}_proj.weight_scale") for e in range(8)])
    np.testing.assert_array_equal(np.asarray(getattr(ex, f"{w}_packed")[...]), packed)
    np.testing.assert_array_equal(np.asarray(getattr(ex, f"{w}_scale")[...]), scale)
  np.testing.assert_array_equal(np.asarray(model.layers[1].mlp.gate.kernel[...]),
                                ck.read("language_model.model.layers.1.mlp.gate.weight").astype(np.float32).T)
  np.testing.assert_array_equal(np.asarray(model.lm_head.kernel[...]),
                                ck.read("language_model.lm_head.weight").astype(np.float32).T)


def test_bf16_experts_transposed(ckpts):
  model, cfg = load_target(ckpts["k2"], dtype=jnp.bfloat16)
  ck = SafetensorsDir(ckpts["k2"])
  ex = model.layers[1].mlp.experts
  np.testing.assert_array_equal(np.asarray(ex.w_gate[...][5]), ck.read("model.layers.1.mlp.experts.5.gate_proj.weight").T)
  np.testing.assert_array_equal(np.asarray(ex.w_down[...][5]), ck.read("model.layers.1.mlp.experts.5.down_proj.weight").T)
  assert model.layers[1].mlp.gate.e_score_correction_bias[...].dtype == jnp.float32


@pytest.mark.parametrize("which,dtype", [("k26", jnp.float32), ("k2", jnp.bfloat16)])
def test_roundtrip_one_device(ckpts, which, dtype):
  out = str(ckpts["dir"] / f"conv_{which}")
  m_hf, cfg = load_target(ckpts[which], dtype=dtype)
  convert_checkpoint(ckpts[which], out, dtype=dtype, drafter_dir=ckpts["drafter"] if which == "k26" else None)
  assert is_converted(out) and not any(".tmp-" in p for p in os.listdir(ckpts["dir"]))
  m_ob, cfg2 = load_target(out, dtype=dtype)
  assert cfg2 == cfg
  np.testing.assert_array_equal(logits_of(m_hf, cfg), logits_of(m_ob, cfg))


def test_drafter_roundtrip(ckpts):
  from flax import nnx
  from ddtree_jax.checkpoint import build_module
  from ddtree_jax.model.dflash import DFlashDrafter
  out = str(ckpts["dir"] / "conv_k26")
  if not is_converted(out):
    convert_checkpoint(ckpts["k26"], out, dtype=jnp.float32, drafter_dir=ckpts["drafter"])
  host, dcfg = read_drafter(ckpts["drafter"], ckpts["cfg"], dtype=jnp.float32)
  restored, dcfg2 = load_drafter(out, ckpts["cfg"], dtype=jnp.float32)
  assert dcfg2 == dcfg and set(host) == set(restored)
  for k in host:
    np.testing.assert_array_equal(host[k], np.asarray(restored[k]))
  ck = SafetensorsDir(ckpts["drafter"])
  np.testing.assert_array_equal(host["fc.kernel"], ck.read("fc.weight").astype(np.float32).T)   # [K*D, D]
  assert host["fc.kernel"].shape == (len(dcfg.target_layer_ids) * 64, 64)
  drafter = build_module(lambda: DFlashDrafter(dcfg, dtype=jnp.float32, rngs=nnx.Rngs(0)), restored)
  assert drafter.layers[0].self_attn.q_proj.kernel[...].shape == (64, dcfg.num_attention_heads * dcfg.head_dim)


def test_roundtrip_8_virtual_devices(ckpts):
  env = dict(os.environ, JAX_PLATFORMS="cpu",
             XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip(),
             PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  r = subprocess.run([sys.executable, __file__, ckpts["k26"], str(ckpts["dir"] / "conv8")], env=env,
                     capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
  assert "OK 8 devices" in r.stdout


def _eight_device_main(hf_dir, out_dir):
  from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
  from ddtree_jax.checkpoint import basic_shardings
  assert jax.device_count() == 8, jax.devices()
  mesh = Mesh(np.array(jax.devices()).reshape(8), ("expert",))
  m1, cfg = load_target(hf_dir, dtype=jnp.float32)                       # one device
  ref = logits_of(m1, cfg)
  convert_checkpoint(hf_dir, out_dir, dtype=jnp.float32, mesh=mesh)      # arrays saved with their shardings
  rule = basic_shardings(mesh)
  m8, _ = load_target(out_dir, dtype=jnp.float32, shardings=rule)        # restored onto the mesh
  packed = m8.layers[1].mlp.experts.gate_packed[...]
  assert packed.sharding == NamedSharding(mesh, P("expert", None, None)), packed.sharding
  assert len(packed.addressable_shards) == 8 and packed.addressable_shards[0].data.shape[0] == 1
  assert m8.lm_head.kernel[...].sharding.is_fully_replicated
  got = logits_of(m8, cfg)
  np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
  md, _ = load_target(hf_dir, dtype=jnp.float32, mesh=mesh)              # HF straight onto the mesh
  np.testing.assert_allclose(logits_of(md, cfg), ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
  m1b, _ = load_target(out_dir, dtype=jnp.float32)                       # the 8-device checkpoint on one device
  np.testing.assert_array_equal(logits_of(m1b, cfg), ref)
  print("OK 8 devices")


if __name__ == "__main__":
  _eight_device_main(sys.argv[1], sys.argv[2])
