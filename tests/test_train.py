"""Training of the embedded default (CPU, tiny sizes): corpus split, BPE, the training forward against
the inference model, a resumable tiny target + drafter run exported to the HF layout and loaded back
through the checkpoint reader, and the shipped default pair."""
import dataclasses
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from configs import default_model as dm
from ddtree_jax.train import bpe, corpus

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT = os.path.join(ROOT, "checkpoints", "default")


def test_split_depends_only_on_the_path():
  assert corpus.split_of("json/decoder.py") == corpus.split_of("json/decoder.py")
  names = [f"pkg{i}/mod{j}.py" for i in range(50) for j in range(40)]
  splits = [corpus.split_of(n) for n in names]
  frac = {s: splits.count(s) / len(splits) for s in corpus.SPLITS}
  assert 0.87 < frac["train"] < 0.93 and 0.03 < frac["val"] < 0.07 and 0.03 < frac["test"] < 0.07
  # Adding or removing other files never moves a file: the split is a function of its path alone.
  assert [corpus.split_of(n) for n in names[::7]] == splits[::7]


def test_corpus_reads_this_interpreters_stdlib():
  info = corpus.corpus_info()
  assert info["python_version"].startswith("3.")
  assert info["files"]["train"] > info["files"]["test"] > 0
  docs = corpus.load_split("test", max_files=3)
  assert len(docs) == 3 and all(corpus.split_of(r) == "test" for r, _ in docs)


def test_bpe_round_trip_and_specials(tmp_path):
  texts = ["def f(x):\n    return x + 1\n", "class A:\n    pass\n", "import os\nprint(os.sep)  # é\n"] * 20
  tok = bpe.train_bpe(texts, 300, str(tmp_path / "tokenizer.json"))
  assert (tok.eos_id, tok.mask_id) == (dm.EOS_ID, dm.MASK_ID)
  for t in texts[:3] + ["λ unseen ☃ text\t\n"]:
    assert tok.decode(tok.encode(t)) == t
  again = bpe.BPETokenizer.load(str(tmp_path))
  assert again.encode(texts[0]) == tok.encode(texts[0])
  stream = bpe.encode_documents(tok, texts[:2])
  assert (stream == tok.eos_id).sum() == 2 and stream[-1] == tok.eos_id


def test_training_forward_matches_the_inference_model():
  from ddtree_jax.cache import init_latent_cache
  from ddtree_jax.model.deepseek import DeepseekV3
  from ddtree_jax.train.forward import target_forward
  for cfg in (dm.tiny_target_config(), dm.int4(dm.tiny_target_config())):
    model = DeepseekV3(cfg, dtype=jnp.float32, rngs=nnx.Rngs(0))
    b, t = 2, 16
    toks = jax.random.randint(jax.random.key(1), (b, t), 0, cfg.vocab_size)
    cache = init_latent_cache(cfg.num_hidden_layers, b, t, cfg.kv_lora_rank, cfg.qk_rope_head_dim, jnp.float32)
    mask = jnp.broadcast_to(jnp.tril(jnp.ones((t, t), bool)), (b, t, t))
    ref = model(toks, jnp.broadcast_to(jnp.arange(t), (b, t)), cache, mask, feature_layers=(0, 2), absorbed=False)
    out = target_forward(model, toks, feature_layers=(0, 2))
    np.testing.assert_allclose(model.logits(out["hidden"]), ref.logits, atol=2e-5, rtol=1e-4)
    np.testing.assert_allclose(out["features"], ref.features, atol=2e-5, rtol=1e-4)
    # Enough capacity for every pair: the dispatch path computes the same function.
    cap = target_forward(model, toks, capacity_factor=float(cfg.n_routed_experts))
    np.testing.assert_allclose(model.logits(cap["hidden"]), ref.logits, atol=2e-5, rtol=1e-4)
    assert float(jnp.max(cap["dropped"])) == 0.0
    np.testing.assert_allclose(np.asarray(out["loads"]).sum(-1), 1.0, rtol=1e-6)


def _tiny(vocab):
  return dm.tiny_target_config(vocab).replace(
      num_hidden_layers=2, hidden_size=32, q_lora_rank=16, kv_lora_rank=32, intermediate_size=64,
      moe_intermediate_size=32)


@pytest.mark.e2e
def test_tiny_target_run_resumes_exports_and_loads(tmp_path):
  """4 steps, then resumed to 8 from the orbax checkpoint; INT4 export loads through load_target."""
  from ddtree_jax.checkpoint.load import load_target
  from ddtree_jax.train import pipeline
  from ddtree_jax.train.target_trainer import train_target
  wd = str(tmp_path)
  data = pipeline.prepare_corpus(wd, 320, max_files=4, log=lambda s: None)
  other = tmp_path / "python3.99"                     # another stdlib: the cached corpus must not be reused
  other.mkdir()
  (other / "os.py").write_text("")
  with pytest.raises(ValueError, match="corpus was built from"):
    pipeline.prepare_corpus(wd, 320, max_files=4, stdlib_root=str(other), log=lambda s: None)
  # An exported target's tokenizer is used as it is (the drafter trainer's case), not retrained:
  reused = pipeline.prepare_corpus(str(tmp_path / "reuse"), 999, max_files=4, log=lambda s: None,
                                   tokenizer_path=data["tokenizer_path"])
  assert reused["tokenizer"].vocab_size == data["tokenizer"].vocab_size
  np.testing.assert_array_equal(reused["streams"]["val"], data["streams"]["val"])
  with pytest.raises(FileNotFoundError, match="no_such"):
    pipeline.prepare_corpus(str(tmp_path / "reuse"), 320, max_files=4, tokenizer_path=str(tmp_path / "no_such.json"))
  bpe_other = tmp_path / "other_tokenizer.json"
  bpe_other.write_text(open(data["tokenizer_path"]).read().replace('"<|mask|>"', '"<|MASK|>"', 1))
  with pytest.raises(ValueError, match="differs from"):
    pipeline.prepare_corpus(str(tmp_path / "reuse"), 320, max_files=4, tokenizer_path=str(bpe_other))
  cfg = _tiny(data["tokenizer"].vocab_size)
  hp = dataclasses.replace(dm.tiny_target_train(), seq_len=32, batch=2, max_steps=4, eval_every=4, ckpt_every=4,
                           eval_tokens=256)
  r1 = train_target(cfg, hp, data["streams"]["train"], data["streams"]["val"], os.path.join(wd, "target"),
                    progress=False, log=lambda s: None)
  assert len(r1.history["loss"]) == 4
  hp = dataclasses.replace(hp, max_steps=8)
  tdir = os.path.join(wd, "export", "target")
  s = pipeline.train_and_export_target(cfg, hp, data, wd, tdir, resume=True, progress=False, log=lambda s: None)
  hist = json.load(open(os.path.join(wd, "target", "target_history.json")))
  assert hist["step"] == list(range(8)) and hist["loss"][-1] < hist["loss"][0]
  assert os.path.exists(os.path.join(wd, "target", "target_loss.png"))
  assert np.isfinite(s["val_loss_int4"]) and abs(s["val_loss_int4"] - s["val_loss_bf16"]) < 0.1
  conf = json.load(open(os.path.join(tdir, "config.json")))
  assert conf["architectures"] == ["DeepseekV3ForCausalLM"]
  assert conf["quantization_config"]["config_groups"]["group_0"]["weights"]["group_size"] == 32
  _, c4 = load_target(tdir)
  assert c4.experts_int4 and c4.vocab_size == data["tokenizer"].vocab_size


@pytest.mark.e2e
def test_tiny_drafter_run_exports_and_decodes_losslessly(tmp_path):
  """A drafter trained (3 steps) against an exported INT4 target, in the public DFlash format; the
  loaded pair decodes exactly as AR (fp32)."""
  from ddtree_jax.engine import Engine
  from ddtree_jax.train import export, pipeline
  from ddtree_jax.train.target_trainer import target_template
  wd = str(tmp_path)
  data = pipeline.prepare_corpus(wd, 320, max_files=4, log=lambda s: None)
  cfg = _tiny(data["tokenizer"].vocab_size)
  c4 = dm.int4(cfg)
  tdir = os.path.join(wd, "export", "target")
  params = {k: np.asarray(v) for k, v in target_template(cfg).init(0).items()}
  export.export_target(c4, export.quantize_experts(c4, params), tdir, tokenizer_path=data["tokenizer_path"])
  dcfg = dm.tiny_drafter_config(c4.replace(num_hidden_layers=3)).replace(
      hidden_size=32, head_dim=16, intermediate_size=64, target_layer_ids=(0, 1), num_target_layers=2)
  dhp = dataclasses.replace(dm.tiny_drafter_train(), seq_len=48, batch=2, blocks_per_seq=3, max_steps=3,
                            eval_every=3, ckpt_every=3)
  stream = data["streams"]["train"]
  seqs = [(stream[i * 40:i * 40 + 40].tolist(), 8) for i in range(6)]
  ddir = os.path.join(wd, "export", "drafter")
  ds = pipeline.train_and_export_drafter(tdir, dcfg, dhp, seqs, wd, ddir, progress=False, log=lambda s: None)
  assert ds["steps"] == 3 and np.isfinite(ds["val_loss"])
  assert os.path.exists(os.path.join(wd, "drafter", "drafter_loss.png"))
  dconf = json.load(open(os.path.join(ddir, "config.json")))
  assert dconf["block_size"] == 8 and dconf["dflash_config"]["mask_token_id"] == dm.MASK_ID
  assert dconf["num_target_layers"] == 2 and dconf["model_type"] == "qwen3"
  target, c4, drafter, dcfg2, tok = pipeline.load_pair(tdir, ddir, dtype=jnp.float32)
  eng = Engine(target, c4, drafter, dcfg2)
  p = [tok.encode("def f(x):\n")]
  a = eng.generate(p, mode="ar", max_new_tokens=6)[0]
  b = eng.generate(p, mode="ddtree", budget=4, max_new_tokens=6)[0]
  assert a.token_ids == b.token_ids


def test_drafter_validation_split():
  """Validation data: the given val-split continuations (all generated data trains), or a seeded held-out
  fraction of the generated data, disjoint from what trains."""
  from ddtree_jax.train import gen_data, pipeline
  seqs = [([i + 1] * (10 + i % 7), 4) for i in range(20)]     # 20 distinct sequences
  data = gen_data.pack(seqs, 32, 0)
  val_seqs = [([7] * 12, 3), ([8] * 15, 5)]
  tr, va, src = pipeline.drafter_train_val(data, val_seqs, 0.05, 32, 0)
  assert src == "val-split prompts" and len(tr[0]) == 20 and len(va[0]) == 2
  np.testing.assert_array_equal(va[1], [12, 15])
  np.testing.assert_array_equal(va[2], [3, 5])
  tr, va, src = pipeline.drafter_train_val(data, None, 0.1, 32, 0)
  assert src.startswith("10%") and len(va[0]) == 2 and len(tr[0]) == 18
  rows = lambda part: {tuple(r) for r in part[0]}
  assert not rows(tr) & rows(va) and rows(tr) | rows(va) == rows(data)
  again = pipeline.drafter_train_val(data, None, 0.1, 32, 0)
  np.testing.assert_array_equal(again[1][0], va[0])


@pytest.mark.skipif(not os.path.exists(os.path.join(DEFAULT, "target", "config.json")),
                    reason="no embedded default checkpoint")
def test_shipped_default_pair_layout():
  from ddtree_jax.checkpoint.drafter_config import load_drafter_config
  from ddtree_jax.config import load_config
  from ddtree_jax.train.export import dir_size
  cfg = load_config(os.path.join(DEFAULT, "target"))
  dcfg = load_drafter_config(os.path.join(DEFAULT, "drafter"), cfg)
  assert cfg.experts_int4 and cfg.quantization.group_size == 32 and cfg.first_k_dense_replace == 1
  assert cfg.n_shared_experts == 1 and cfg.q_lora_rank and cfg.topk_method == "noaux_tc"
  assert dcfg.block_size == 16 and dcfg.mask_token_id == dm.MASK_ID
  assert dir_size(os.path.join(DEFAULT, "target")) + dir_size(os.path.join(DEFAULT, "drafter")) < 50 * 2**20
  info = json.load(open(os.path.join(DEFAULT, "target", "training_info.json")))
  assert info["corpus"]["python_version"].startswith("3.12")
  tok = bpe.BPETokenizer.load(os.path.join(DEFAULT, "target"))
  assert tok.vocab_size == cfg.vocab_size and tok.eos_id == cfg.eos_token_id


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_shipped_default_pair_is_lossless_in_fp32():
  from ddtree_jax.engine import Engine
  from ddtree_jax.train import pipeline
  target, cfg, drafter, dcfg, tok = pipeline.load_pair(os.path.join(DEFAULT, "target"),
                                                       os.path.join(DEFAULT, "drafter"), dtype=jnp.float32)
  eng = Engine(target, cfg, drafter, dcfg)
  p = [tok.encode("def fibonacci(n):\n")]
  a = eng.generate(p, mode="ar", max_new_tokens=48)[0]
  for mode, budget in (("dflash", 1), ("ddtree", 32)):
    r = eng.generate(p, mode=mode, budget=budget, max_new_tokens=48)[0]
    assert r.token_ids == a.token_ids
    assert r.tau > 1.2
