"""Golden outputs of the SHIPPED embedded target (checkpoints/default/target) from HF transformers.

Shows that the exported pair is interoperable: HF transformers' DeepseekV3ForCausalLM reads the target's
config.json and tensors once the INT4 experts are dequantised for it. Like make_golden.py this is run once,
by hand, in a separate environment (transformers is not a dependency of ddtree-jax):

    python3 -m venv /tmp/hfvenv            # Python 3.11
    /tmp/hfvenv/bin/pip install torch==2.13.0 transformers==5.24.0 safetensors numpy
    /tmp/hfvenv/bin/python tests/golden/make_default_golden.py          # writes tests/golden/default_target.npz
    /tmp/hfvenv/bin/python tests/golden/make_default_golden.py --check  # recompute and compare with the file

Steps:
  1. reads checkpoints/default/target/model.safetensors and dequantises every routed expert from the
     compressed-tensors pack-quantized layout with its own numpy code (REFERENCE.md section 1: nibble q+8,
     8 per int32 along the input dimension, least significant first; W = (nibble - 8) * scale[o, k // 32]),
     in float32 (exact: a 4-bit integer times a bf16 scale fits in fp32; bf16 would round some products);
  2. writes a temporary HF directory: the same config.json without `quantization_config`, the dense tensors
     as they are and `...experts.{e}.{gate,up,down}_proj.weight` per expert;
  3. loads it with `DeepseekV3ForCausalLM.from_pretrained` in float32 (eager attention), requiring no missing
     or unexpected keys, and records for a code prompt (tokenised with the shipped tokenizer.json):
     input_ids [1, T] int32, logits [1, T, V] float32, greedy_tokens [1, 16] int32 (generate, do_sample=False).
The test (tests/test_hf_parity.py::test_shipped_default_target_matches_transformers) loads the same
directory through ddtree-jax's reader, INT4 kernels and all, and compares.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import torch
from safetensors.torch import load_file, save_file

import transformers
from transformers import DeepseekV3ForCausalLM

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TARGET = os.path.join(ROOT, "checkpoints", "default", "target")
OUT = os.path.join(ROOT, "tests", "golden", "default_target.npz")
PROMPT = "import os\n\n\ndef read_lines(path):\n    \"\"\"Return the lines of a text file.\"\"\"\n    with open(path) as f:\n"
GREEDY_NEW = 16


def dequantize(packed: np.ndarray, scale: np.ndarray, shape: tuple[int, int], group: int) -> np.ndarray:
  """packed int32 [out, in/8], scale float32 [out, in/group] -> float32 [out, in]."""
  out_dim, in_dim = shape
  words = packed.astype(np.int64) & 0xFFFFFFFF                                   # unsigned view
  shifts = 4 * np.arange(8, dtype=np.int64)
  nibbles = (words[:, :, None] >> shifts) & 0xF                                  # [out, in/8, 8]
  q = nibbles.reshape(out_dim, in_dim).astype(np.float32) - 8.0
  return q * np.repeat(scale.astype(np.float32), group, axis=1)


def hf_directory(tmp: str) -> str:
  cfg = json.load(open(os.path.join(TARGET, "config.json")))
  group = cfg["quantization_config"]["config_groups"]["group_0"]["weights"]["group_size"]
  del cfg["quantization_config"]
  cfg["torch_dtype"] = "float32"
  tensors = load_file(os.path.join(TARGET, "model.safetensors"))
  out = {}
  for name, t in tensors.items():
    if name.endswith(".weight_packed"):
      base = name[: -len(".weight_packed")]
      shape = tuple(int(v) for v in tensors[base + ".weight_shape"].tolist())
      w = dequantize(t.numpy(), tensors[base + ".weight_scale"].float().numpy(), shape, group)
      out[base + ".weight"] = torch.from_numpy(w)
    elif name.endswith((".weight_scale", ".weight_shape")):
      continue
    else:
      out[name] = t.float()
  d = os.path.join(tmp, "hf_target")
  os.makedirs(d)
  json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=1)
  save_file(out, os.path.join(d, "model.safetensors"))
  return d


def golden() -> dict:
  from tokenizers import Tokenizer
  ids = Tokenizer.from_file(os.path.join(TARGET, "tokenizer.json")).encode(PROMPT).ids
  with tempfile.TemporaryDirectory() as tmp:
    model, info = DeepseekV3ForCausalLM.from_pretrained(hf_directory(tmp), torch_dtype=torch.float32,
                                                        attn_implementation="eager", output_loading_info=True)
  bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
  if bad:
    raise SystemExit(f"transformers did not read the shipped target cleanly: {bad}")
  model.eval()
  x = torch.tensor([ids], dtype=torch.long)
  with torch.no_grad():
    logits = model(x).logits.float().numpy()
    gen = model.generate(x, do_sample=False, max_new_tokens=GREEDY_NEW, min_new_tokens=GREEDY_NEW,
                         eos_token_id=None, pad_token_id=0)
  return {"input_ids": np.asarray([ids], np.int32), "logits": logits.astype(np.float32),
          "greedy_tokens": gen[:, len(ids):].numpy().astype(np.int32)}


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--check", action="store_true", help="recompute and compare with the committed file")
  args = ap.parse_args()
  print(f"torch {torch.__version__}, transformers {transformers.__version__}, python {sys.version.split()[0]}")
  g = golden()
  if args.check:
    old = dict(np.load(OUT))
    err = float(np.abs(old["logits"] - g["logits"]).max() / np.abs(old["logits"]).max())
    same = all(np.array_equal(old[k], g[k]) for k in ("input_ids", "greedy_tokens"))
    print(f"logits max rel err {err:.2e}, ids and greedy tokens identical: {same}")
    sys.exit(0 if err < 1e-6 and same else 1)
  np.savez_compressed(OUT, **g)
  print(f"wrote {OUT}: {len(g['input_ids'][0])} prompt tokens, greedy {g['greedy_tokens'][0].tolist()}")


if __name__ == "__main__":
  main()
