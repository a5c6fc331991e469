"""The engine on k-chunked INT4 experts (ddtree_jax/model/experts.py use_k_chunks; on a GPU backend the engine's
default): the same tokens as on the stored layout, the layout choice and its errors, and the expert sharding
kept through the re-laying (8 virtual CPU devices, subprocess)."""
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from configs.tiny import tiny, tiny_drafter
from ddtree_jax.config import Int4Quantization
from ddtree_jax.engine import Engine
from ddtree_jax.model.deepseek import DeepseekV3
from ddtree_jax.model.dflash import DFlashDrafter
from ddtree_jax.model.experts import Int4Experts, kernel_k_chunk, use_kernel_layout

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def experts_of(model):
  return [m for _, m in nnx.iter_graph(model) if isinstance(m, Int4Experts)]


def test_ddtree_tokens_identical_on_k_chunks():
  """Engine(moe_layout="k_chunks") re-lays the model's experts itself (the GPU default, here on the CPU: the XLA
  path converts back in every call) and gives the tokens of the stored layout."""
  cfg = tiny(stop_token_ids=(), hidden_size=256, moe_intermediate_size=256)     # multiples of KERNEL_K_CHUNK
  dcfg = tiny_drafter(cfg, block_size=8)
  prompts = [[5, 17, 33, 2, 90, 41, 7], [12, 250, 3, 3, 64]]
  out = []
  for layout in ("as_is", "k_chunks"):
    target = DeepseekV3(cfg, dtype=jnp.float32, rngs=nnx.Rngs(3))
    eng = Engine(target, cfg, DFlashDrafter(dcfg, dtype=jnp.float32, rngs=nnx.Rngs(4)), dcfg, moe_layout=layout)
    experts = experts_of(target)
    assert len(experts) == cfg.num_hidden_layers - cfg.first_k_dense_replace
    if layout == "k_chunks":
      assert eng.moe_k_chunk == 256 and all(a.ndim == 4 for m in experts for a in m.arrays())
      # [E, D/C, I, C/8] for gate/up, [E, I/C, D, C/g] for the down scales
      assert experts[0].gate_packed[...].shape == (8, 1, 256, 32) and experts[0].down_scale[...].shape == (8, 1, 256, 8)
    else:
      assert eng.moe_k_chunk is None and all(a.ndim == 3 for m in experts for a in m.arrays())
    out.append([r.token_ids for r in eng.generate(prompts, mode="ddtree", budget=12, max_new_tokens=10)])
  assert out[0] == out[1] and all(len(t) == 10 for t in out[0])


def test_refused_engine_leaves_the_model_alone():
  cfg = tiny(stop_token_ids=(), hidden_size=256, moe_intermediate_size=256)
  target = DeepseekV3(cfg, dtype=jnp.float32, rngs=nnx.Rngs(3))
  with pytest.raises(ValueError, match="pass both drafter and drafter_cfg"):
    Engine(target, cfg, None, tiny_drafter(cfg), moe_layout="k_chunks")
  assert all(a.ndim == 3 for m in experts_of(target) for a in m.arrays())
  assert use_kernel_layout(target, 128) == len(experts_of(target))           # the explicit call, chunk 128
  assert experts_of(target)[0].up_packed[...].shape == (8, 2, 256, 16)


def test_layout_choice():
  big = tiny(hidden_size=256, moe_intermediate_size=512)
  on_gpu = jax.default_backend() == "gpu"
  assert kernel_k_chunk(big, "auto") == (256 if on_gpu else None)      # off the GPU the XLA path reads stored
  assert kernel_k_chunk(big, "k_chunks") == 256
  assert kernel_k_chunk(big, "as_is") is None
  assert kernel_k_chunk(tiny(), "auto") is None                        # 64 / 32 are not multiples of 256
  assert kernel_k_chunk(tiny(int4=False, hidden_size=256, moe_intermediate_size=256), "auto") is None   # dense
  with pytest.raises(ValueError, match=r"moe_layout 'k_chunks' needs INT4 experts with hidden_size \(64\)"):
    kernel_k_chunk(tiny(), "k_chunks")
  with pytest.raises(ValueError, match="moe_layout must be one of"):
    kernel_k_chunk(tiny(), "planar")
  # a group size the kernels do not take (or that the chunk cannot hold): left as loaded, refused when forced
  g512 = tiny(hidden_size=1024, moe_intermediate_size=1024, quantization=Int4Quantization(group_size=512))
  assert kernel_k_chunk(g512, "auto") is None
  with pytest.raises(ValueError, match="a group size of 8-128 \\(got 512\\)"):
    kernel_k_chunk(g512, "k_chunks")


SHARDED = r"""
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from custom_calls.moe_int4.k_chunks import to_k_chunks
from ddtree_jax.model.experts import _to_k_chunks
mesh = Mesh(np.array(jax.devices()).reshape(1, 8), ("data", "model"))
rng = np.random.default_rng(0)
w = rng.integers(-2**31, 2**31, (16, 24, 64), dtype=np.int64).astype(np.int32)      # [E, N, K/8], K = 512
s = rng.random((16, 24, 16)).astype(np.float32)
put = lambda a: jax.device_put(a, NamedSharding(mesh, P("model", None, None)))
cw, cs = _to_k_chunks(put(w), put(s), 256, 32)
ew, es = to_k_chunks(jnp.asarray(w), jnp.asarray(s), 256)
assert cw.sharding.spec == P("model", None, None, None), cw.sharding
assert cs.sharding.spec == P("model", None, None, None), cs.sharding
np.testing.assert_array_equal(np.asarray(cw), np.asarray(ew))
np.testing.assert_array_equal(np.asarray(cs), np.asarray(es))
print("OK", cw.shape, len(cw.addressable_shards))
"""


def test_re_laying_keeps_expert_sharding():
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu",
             PYTHONPATH=ROOT)
  r = subprocess.run([sys.executable, "-c", SHARDED], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
  assert r.returncode == 0, r.stderr[-3000:]
  assert "OK (16, 2, 24, 32) 8" in r.stdout
