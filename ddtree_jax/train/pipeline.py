"""The phases of training the embedded default, shared by the CLIs (`ddtree-train-target`,
`ddtree-train-drafter`) and `benchmarks/train_default.py`.

workdir layout: tokenizer.json, corpus.json, tokens_{train,val,test}.npy, target/ (orbax + history +
loss PNG), drafter/ (same), drafter_data.npz (generated continuations), *_summary.json.
`mesh=`: the trainers run data parallel on it (`train/data_parallel.py`); with several processes, process 0
writes the files other than the orbax checkpoints.
"""
from __future__ import annotations

import filecmp
import json
import math
import os
import time
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from ddtree_jax.train import bpe, common, corpus, data_parallel

Log = Callable[[str], None]


def prepare_corpus(workdir: str, vocab_size: int, *, max_files: Optional[int] = None,
                   stdlib_root: Optional[str] = None, tokenizer_path: Optional[str] = None, log: Log = print) -> dict:
  """Tokenizer + token streams of the three splits (reused when already in workdir).

  stdlib_root: the standard library to read (default: the running interpreter's, corpus.stdlib_root()).
  tokenizer_path: an existing tokenizer.json (an exported target's) to encode with instead of training one;
  a workdir whose tokenizer differs from it is refused.
  """
  os.makedirs(workdir, exist_ok=True)
  tok_path = os.path.join(workdir, "tokenizer.json")
  paths = {s: os.path.join(workdir, f"tokens_{s}.npy") for s in corpus.SPLITS}
  if tokenizer_path is not None and not os.path.isfile(tokenizer_path):
    raise FileNotFoundError(f"tokenizer {tokenizer_path} does not exist")
  if os.path.exists(tok_path) and all(os.path.exists(p) for p in paths.values()):
    if tokenizer_path is not None and not filecmp.cmp(tokenizer_path, tok_path, shallow=False):
      raise ValueError(f"{workdir}: its tokenizer.json differs from {tokenizer_path} (the target's); use another "
                       "--workdir or remove its tokenizer.json and tokens_*.npy")
    tok = bpe.BPETokenizer.load(tok_path)
    streams = {s: np.load(p) for s, p in paths.items()}
    with open(os.path.join(workdir, "corpus.json")) as f:
      info = json.load(f)
    want = os.path.realpath(stdlib_root or corpus.stdlib_root())
    if os.path.realpath(info.get("stdlib_root", want)) != want:
      raise ValueError(f"{workdir}: its corpus was built from {info['stdlib_root']}, not {want} "
                       "(--stdlib_root); use another --workdir or remove its tokenizer.json and tokens_*.npy")
    return {"tokenizer": tok, "tokenizer_path": tok_path, "streams": streams, "info": info}
  t0 = time.perf_counter()
  docs = {s: corpus.load_split(s, root=stdlib_root, max_files=max_files) for s in corpus.SPLITS}
  info = corpus.corpus_info(stdlib_root)
  info["files_used"] = {s: len(d) for s, d in docs.items()}
  if tokenizer_path is not None:
    import shutil
    shutil.copyfile(tokenizer_path, tok_path)
    tok = bpe.BPETokenizer.load(tok_path)
    log(f"tokenizer: {tok.vocab_size} tokens from {tokenizer_path}")
  else:
    tok = bpe.train_bpe((t for _, t in docs["train"]), vocab_size, tok_path)
    log(f"tokenizer: {tok.vocab_size} tokens trained on {len(docs['train'])} files in {time.perf_counter() - t0:.1f}s")
  streams = {}
  for s, d in docs.items():
    streams[s] = bpe.encode_documents(tok, [t for _, t in d])
    np.save(paths[s], streams[s])
  info["tokens"] = {s: int(len(v)) for s, v in streams.items()}
  info["bytes_per_token_train"] = sum(len(t.encode()) for _, t in docs["train"]) / max(1, len(streams["train"]))
  info["test_files"] = [r for r, _ in docs["test"]]
  common.write_json(os.path.join(workdir, "corpus.json"), info)
  log(f"corpus: Python {info['python_version']} stdlib, tokens {info['tokens']} ({time.perf_counter() - t0:.1f}s)")
  return {"tokenizer": tok, "tokenizer_path": tok_path, "streams": streams, "info": info}


def train_and_export_target(cfg, hp, data: dict, workdir: str, export_dir: str, *, time_budget_s=None,
                            resume=False, progress=True, log: Log = print, mesh=None) -> dict:
  """Trains the target (data parallel on `mesh` when given), quantises its experts to INT4, measures val
  loss before/after, exports."""
  from configs.default_model import int4
  from ddtree_jax import sharding
  from ddtree_jax.train import export
  from ddtree_jax.train.target_trainer import evaluate, target_template, train_target
  res = train_target(cfg, hp, data["streams"]["train"], data["streams"]["val"], os.path.join(workdir, "target"),
                     time_budget_s=time_budget_s, resume=resume, progress=progress, log=log, mesh=mesh)
  cfg4 = int4(cfg)
  t0 = time.perf_counter()
  host = data_parallel.to_host(res.params)
  p4 = export.quantize_experts(cfg4, host)
  val = data["streams"]["val"]
  n_eval = max(hp.eval_tokens, 4 * hp.seq_len)
  tpl = res.template
  before = evaluate(tpl, res.params, val, hp.seq_len, hp.batch, n_eval, mesh=mesh)
  tpl4 = target_template(cfg4)
  p4_dev = data_parallel.place_params(p4, mesh, sharding.TARGET_RULES, cfg4)
  after = evaluate(tpl4, p4_dev, val, hp.seq_len, hp.batch, n_eval, mesh=mesh)
  test = data["streams"]["test"]
  test_after = evaluate(tpl4, p4_dev, test, hp.seq_len, hp.batch, n_eval, mesh=mesh)
  summary = {
      "val_loss_bf16": before, "val_ppl_bf16": math.exp(before), "val_loss_int4": after,
      "val_ppl_int4": math.exp(after), "test_loss_int4": test_after, "test_ppl_int4": math.exp(test_after),
      "eval_tokens": int(min(len(val), n_eval)), "steps": res.history["step"][-1] + 1 if res.history["step"] else 0,
      "best_step": res.history.get("best_step"), "train_seconds": res.history.get("train_seconds"),
      "tokens_seen": (res.history["step"][-1] + 1) * hp.batch * hp.seq_len if res.history["step"] else 0,
      "params_total": int(sum(np.prod(v.shape) for v in host.values())),
  }
  log(f"INT4 quantisation: val loss {before:.4f} (ppl {math.exp(before):.3f}) -> {after:.4f} "
      f"(ppl {math.exp(after):.3f}) in {time.perf_counter() - t0:.1f}s")
  info = {"corpus": {k: v for k, v in data["info"].items() if k != "test_files"}, "target_training": summary,
          "hyperparameters": dict(hp.__dict__)}
  if not data_parallel.is_writer():
    summary["export_bytes"] = None     # process 0 exports
    return summary
  export.export_target(cfg4, p4, export_dir, tokenizer_path=data["tokenizer_path"], info=info)
  summary["export_bytes"] = export.dir_size(export_dir)
  common.write_json(os.path.join(workdir, "target_summary.json"), summary)
  log(f"exported target to {export_dir} ({summary['export_bytes'] / 2**20:.1f} MiB)")
  return summary


def load_pair(target_dir: str, drafter_dir: Optional[str] = None, dtype=jnp.bfloat16):
  """(target, cfg, drafter, dcfg, tokenizer) from exported directories."""
  from flax import nnx
  from ddtree_jax.checkpoint.load import build_module, load_drafter, load_target
  from ddtree_jax.model.dflash import DFlashDrafter
  target, cfg = load_target(target_dir, dtype=dtype)
  drafter = dcfg = None
  if drafter_dir:
    params, dcfg = load_drafter(drafter_dir, cfg, dtype=dtype)
    drafter = build_module(lambda: DFlashDrafter(dcfg, dtype=dtype, rngs=nnx.Rngs(0)), params)
  tok = bpe.BPETokenizer.load(target_dir) if os.path.exists(os.path.join(target_dir, "tokenizer.json")) else None
  return target, cfg, drafter, dcfg, tok


def with_xla_kernels(fn, *args, **kw):
  """Runs fn; if a GPU kernel path fails, retries once with the plain-XLA references of the custom calls."""
  log = kw.get("log", print)
  try:
    return fn(*args, **kw)
  except Exception as e:  # noqa: BLE001 - a kernel failure of any kind
    if jax.default_backend() != "gpu":
      raise
    log(f"{type(e).__name__}: {str(e)[:300]} -- retrying with the XLA reference kernels")
    force_xla_kernels()
    return fn(*args, **kw)


def force_xla_kernels():
  import functools
  import custom_calls
  for name in ("mla_attention", "routed_experts_int4"):
    f = getattr(custom_calls, name)
    if not isinstance(f, functools.partial):
      setattr(custom_calls, name, functools.partial(f, impl="xla"))


def generate_drafter_data(engine, tok, train_stream: np.ndarray, workdir: str, *, num_prompts: int, prompt_len: int,
                          max_new_tokens: int, temperatures=(0.0, 1.0), batch: int = 256, seed: int = 0,
                          time_budget_s: Optional[float] = None, resume: bool = True, log: Log = print,
                          cache_name: str = "drafter_data.npz"):
  """Continuations of prompts from `train_stream` (a split's tokens) by the target (half of the prompts per
  temperature); cached in workdir/`cache_name`. Returns [(ids, prompt_len)]."""
  from ddtree_jax.train import gen_data
  path = os.path.join(workdir, cache_name)
  if resume and os.path.exists(path):
    z = np.load(path)
    seqs = [(z["tokens"][i, :z["lengths"][i]].tolist(), int(z["starts"][i])) for i in range(len(z["lengths"]))]
    log(f"reusing {len(seqs)} generated sequences from {path}")
    return seqs
  rng = np.random.default_rng(seed)
  newline = [i for i in range(tok.vocab_size) if "\n" in tok.decode([i])]
  prompts = gen_data.sample_prompts(train_stream, num_prompts, prompt_len, rng, tok.eos_id, newline)
  deadline = time.perf_counter() + time_budget_s if time_budget_s else None
  seqs = []
  per_t = math.ceil(len(prompts) / len(temperatures))
  # Interleave temperatures batch by batch so a deadline leaves a mix of both.
  chunks = []
  for ti, t in enumerate(temperatures):
    ps = prompts[ti * per_t:(ti + 1) * per_t]
    chunks += [(j, t, ps[j:j + batch]) for j in range(0, len(ps), batch)]
  chunks.sort(key=lambda c: c[0])
  for j, t, ps in chunks:
    # (several processes generate together on one mesh: process 0's clock decides for all)
    if deadline is not None and data_parallel.from_process_0(int(time.perf_counter() > deadline)):
      log(f"generation: time budget reached after {len(seqs)} sequences")
      break
    seqs += gen_data.generate_continuations(engine, ps, max_new_tokens=max_new_tokens, temperature=t,
                                            seed=seed + j + int(1000 * t), batch=batch, log=log)
  max_len = max(len(s) for s, _ in seqs)
  toks = np.full((len(seqs), max_len), tok.eos_id, np.int32)
  for i, (s, _) in enumerate(seqs):
    toks[i, :len(s)] = s
  if data_parallel.is_writer():
    np.savez(path, tokens=toks, lengths=np.asarray([len(s) for s, _ in seqs], np.int32),
             starts=np.asarray([p for _, p in seqs], np.int32))
  return seqs


def generate_drafter_val_data(engine, tok, val_stream: np.ndarray, workdir: str, *, num_prompts: int,
                              prompt_len: int, max_new_tokens: int, batch: int = 256, resume: bool = True,
                              log: Log = print):
  """The drafter's validation set: greedy continuations of `num_prompts` prompts from the val split (text
  neither model trained on), cached in workdir/drafter_val_data.npz. None when num_prompts is 0."""
  if not num_prompts:
    return None
  return generate_drafter_data(engine, tok, val_stream, workdir, num_prompts=num_prompts, prompt_len=prompt_len,
                               max_new_tokens=max_new_tokens, temperatures=(0.0,), batch=batch, seed=1,
                               resume=resume, log=log, cache_name="drafter_val_data.npz")


def drafter_train_val(data, val_seqs, val_fraction: float, seq_len: int, pad_id: int):
  """(train, val, description) from packed sequences `data` (tokens, lengths, starts): with `val_seqs`, all of
  `data` trains and `val_seqs` (packed) validates; otherwise a seeded `val_fraction` of `data` is held out."""
  from ddtree_jax.train import gen_data
  if val_seqs:
    return data, gen_data.pack(val_seqs, seq_len, pad_id), "val-split prompts"
  n = len(data[0])
  n_val = max(1, int(n * val_fraction))
  perm = np.random.default_rng(0).permutation(n)
  return (tuple(a[perm[n_val:]] for a in data), tuple(a[perm[:n_val]] for a in data),
          f"{val_fraction:.0%} of the train-split continuations")


def train_and_export_drafter(target_dir: str, dcfg, hp, seqs, workdir: str, export_dir: str, *, time_budget_s=None,
                             resume=False, progress=True, val_fraction=0.05, val_seqs=None, log: Log = print,
                             mesh=None) -> dict:
  """Trains the drafter (data parallel on `mesh` when given) against the exported target and exports it.

  val_seqs: the validation sequences (e.g. greedy continuations of val-split prompts, text neither model trained
  on); without them `val_fraction` of `seqs` is held out (continuations of the same train-split files that the
  drafter trains on)."""
  from ddtree_jax.train import export, gen_data
  from ddtree_jax.train.drafter_trainer import train_drafter
  from ddtree_jax.train.params import flat_params
  target, cfg, _, _, _ = load_pair(target_dir)
  tparams = flat_params(target)
  data = gen_data.pack(seqs, hp.seq_len, cfg.eos_token_id)
  n = len(data[0])
  train, val, val_source = drafter_train_val(data, val_seqs, val_fraction, hp.seq_len, cfg.eos_token_id)
  log(f"drafter data: {len(train[0])} train / {len(val[0])} val sequences ({val_source}), "
      f"{int(np.sum(train[1] - train[2]))} response tokens")
  res = train_drafter(cfg, tparams, dcfg, hp, train, os.path.join(workdir, "drafter"), val_data=val,
                      time_budget_s=time_budget_s, resume=resume, progress=progress, log=log, mesh=mesh)
  h = res.history
  summary = {"steps": h["step"][-1] + 1 if h["step"] else 0, "train_seconds": h.get("train_seconds"),
             "val_loss": h["val_loss"][-1] if h["val_loss"] else None,
             "val_tau_est": h["val_tau_est"][-1] if h["val_tau_est"] else None,
             "val_source": val_source, "val_sequences": len(val[0]),
             "sequences": n, "response_tokens": int(np.sum(data[1] - data[2]))}
  host = data_parallel.to_host(res.params)
  if not data_parallel.is_writer():
    summary["export_bytes"] = None     # process 0 exports
    return summary
  export.export_drafter(dcfg, host, export_dir,
                        info={"drafter_training": summary, "hyperparameters": dict(hp.__dict__),
                              "target": os.path.basename(os.path.abspath(target_dir))})
  summary["export_bytes"] = export.dir_size(export_dir)
  common.write_json(os.path.join(workdir, "drafter_summary.json"), summary)
  log(f"exported drafter to {export_dir} ({summary['export_bytes'] / 2**20:.1f} MiB)")
  return summary
