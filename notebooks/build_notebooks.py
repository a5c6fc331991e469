"""Writes the notebooks of this folder from the cell sources below (outputs empty).

  python notebooks/build_notebooks.py        # then commit notebooks/*.ipynb
Editing a notebook by hand in Jupyter is fine too; strip it before committing: python scripts/strip_notebooks.py
"""
import os

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = os.path.dirname(os.path.abspath(__file__))

SETUP = '''\
# Install (Colab or a fresh environment), from a clone of the repository:
#   !git clone <this repository> ddtree-jax && pip install -e "ddtree-jax[notebooks]"
# Here the package is already installed (make setup); this cell only checks it and finds the repo root.
import os, sys, importlib.util
if importlib.util.find_spec("ddtree_jax") is None:   # a checkout without the package installed
    sys.path.insert(0, os.path.abspath(".." if os.path.basename(os.getcwd()) == "notebooks" else "."))
os.environ.setdefault("JAX_PLATFORMS", "cpu")   # these notebooks run on the CPU; drop this on a GPU machine
import jax, ddtree_jax
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(ddtree_jax.__file__)))   # the repository
print("python:", sys.executable)
print("jax", jax.__version__, "devices:", jax.devices())'''

QUICKSTART = [
    new_markdown_cell("""\
# ddtree-jax quickstart

Load the embedded default target and its DFlash drafter, generate with the three modes — plain
autoregressive (`ar`), the DFlash chain (`dflash`) and the DDTree draft tree (`ddtree`) — check that the
texts are identical at temperature 0, and look inside one speculative round.

Runs on a CPU in about a minute. Without `checkpoints/default` the loader falls back to a random-weight tiny
model with a byte tokenizer (its text is noise, but the three modes still agree)."""),
    new_code_cell(SETUP),
    new_markdown_cell("""\
## Load the target and the drafter
`load_models(None, None, ...)` is what `ddtree-generate` does without `--model_dir`. Float32 here: at T=0
all modes then give exactly the same tokens (in bfloat16 near-tied argmaxes can flip between the
one-token AR step and the tree verify, see `benchmarks/RESULTS.md`)."""),
    new_code_cell('''\
import jax.numpy as jnp
from ddtree_jax.cli.common import load_models
from ddtree_jax.engine import Engine

target, cfg, drafter, dcfg, tokenizer, label = load_models(None, None, jnp.float32, want_drafter=True)
print(label)
print(f"target: {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, {cfg.n_routed_experts} experts, vocab {cfg.vocab_size}")
print(f"drafter: {dcfg.num_hidden_layers} layers, block {dcfg.block_size}, reads target layers {list(dcfg.target_layer_ids)}")
engine = Engine(target, cfg, drafter, dcfg)'''),
    new_markdown_cell("""\
## Generate with `ar`, `dflash` and `ddtree`
The first call of each mode compiles its programs (a few seconds each on a CPU); `tokens_per_s` counts
only the generation. `tau` is the mean number of tokens a round emits (AR: 1)."""),
    new_code_cell('''\
prompt = "def fibonacci(n):\\n"
prompt_ids = tokenizer.encode(prompt)
results = {}
for mode in ("ar", "dflash", "ddtree"):
    results[mode] = engine.generate([prompt_ids], mode=mode, budget=16, max_new_tokens=32)[0]
    results[mode].text = tokenizer.decode(results[mode].token_ids)

print(prompt + results["ar"].text)'''),
    new_code_cell('''\
same = results["ar"].token_ids == results["dflash"].token_ids == results["ddtree"].token_ids
print("identical token ids at T=0:", same)
assert same, {m: r.text for m, r in results.items()}
print(f"{'mode':8} {'rounds':>6} {'tau':>6} {'tokens/s':>9}  tokens per round")
for mode, r in results.items():
    s = r.stats()
    print(f"{mode:8} {s['rounds']:6d} {s['tau']:6.2f} {s['tokens_per_s']:9.1f}  {s['accepted_per_round']}")'''),
    new_markdown_cell("""\
## Inside one DDTree round
The drafter proposes a block in one forward; the best-first tree keeps the 16 most probable prefixes
(edges: the drafter's probability of a token at its position); the target verifies the whole tree in one
forward and the walk follows the target's own choices. Green: the accepted draft tokens; gold: the
target's bonus token. Below: the round that emitted the most tokens."""),
    new_code_cell('''\
from IPython.display import Image, display
from ddtree_jax.viz import plot_tree, tracing

# The same generation again, tracing each round before it runs (the compiled rounds are unchanged).
with tracing(engine) as traces:
    traced = engine.generate([prompt_ids], mode="ddtree", budget=16, max_new_tokens=32)[0]
assert traced.token_ids == results["ddtree"].token_ids
best = max(traces, key=lambda t: len(t.path))
print(f"{len(traces)} rounds traced; round {best.round} emitted {tokenizer.decode(best.accepted_tokens)!r}")
plot_tree(best, tokenizer, "quickstart_tree.png")
display(Image("quickstart_tree.png"))'''),
    new_markdown_cell("""\
The same from the command line, one PNG + JSON per round:

    ddtree-generate --mode=ddtree --budget=16 --max_new_tokens=32 --trace_dir=/tmp/trees"""),
    new_markdown_cell("""\
## Stop strings and log-probabilities
A stop string ends a request once its text contains it (checked on the host after each compiled call: the
tokens a call ran past it are dropped); the text ends before it. `logprobs=True` also returns each token's
log-probability under the target, from the forward that chose it (here the tree verify). Command line:
`ddtree-generate --stop=... --logprobs --output_json=out.json`."""),
    new_code_cell('''\
from ddtree_jax.stop_strings import StopStrings

text = results["ar"].text
stop = text[len(text) // 2:][:3]               # three characters the output reaches
stops = StopStrings(tokenizer.decode, [[stop]])
r = engine.generate([prompt_ids], mode="ddtree", budget=16, max_new_tokens=32, stop_when=stops.tokens_to_keep,
                    logprobs=True)[0]
print(f"stop {stop!r}: {r.stop_reason} after {len(r.token_ids)} tokens; text {stops.cut(0, tokenizer.decode(r.token_ids))!r}")
for token, logprob in zip(r.token_ids, r.logprobs):
    print(f"{tokenizer.decode([token])!r:>14} {logprob:8.3f}")'''),
]

CHECKPOINT = [
    new_markdown_cell("""\
# Kimi K2.6 checkpoints: convert, load, plan

A real Kimi K2.6 directory (`moonshotai/Kimi-K2.6`, ~594 GB) is converted once with `ddtree-convert`:

    ddtree-convert --hf_dir=/models/Kimi-K2.6 --drafter_dir=/models/Kimi-K2.6-DFlash \\
        --out_dir=/models/k26-ddtree --mesh=1x8 --dtype=bfloat16

Here the same steps run on a *small* random checkpoint written in the exact K2.6 layout: the multimodal
config (`KimiK25ForConditionalGeneration`, text model under `text_config`, compressed-tensors INT4 experts as
`weight_packed`/`weight_scale`/`weight_shape`), tensors under `language_model.`, vision tower and projector
tensors that the text engine skips, several shards and an index."""),
    new_code_cell(SETUP),
    new_code_cell('''\
import json, tempfile
from configs.tiny import tiny
from ddtree_jax.checkpoint import synthetic

work = tempfile.mkdtemp(prefix="k26_demo_")
cfg = tiny(stop_token_ids=())
hf_dir = synthetic.write_target_checkpoint(os.path.join(work, "Kimi-K2.6-small"), cfg, layout="k26", n_shards=3)
drafter_dir = synthetic.write_drafter_checkpoint(os.path.join(work, "drafter-small"), synthetic.tiny_drafter_config(cfg))
for name in sorted(os.listdir(hf_dir)):
    print(f"{name:40s} {os.path.getsize(os.path.join(hf_dir, name)):>10,d} B")
config = json.load(open(os.path.join(hf_dir, "config.json")))
print("architectures:", config["architectures"], "| text_config.quantization_config.format:",
      config["text_config"]["quantization_config"]["format"])
index = json.load(open(os.path.join(hf_dir, "model.safetensors.index.json")))["weight_map"]
print(len(index), "tensors, e.g.:")
for k in [k for k in index if "experts.0.gate_proj" in k][:3] + [k for k in index if k.startswith("vision_tower")][:2]:
    print("  ", k)'''),
    new_markdown_cell("""\
## Convert with `ddtree-convert`
The CLI checks every shard header first, converts one decoder layer at a time (host memory ~ one shard),
keeps the INT4 experts packed, skips the vision tensors, and writes an orbax directory atomically."""),
    new_code_cell('''\
import subprocess
out_dir = os.path.join(work, "k26-ddtree")
cmd = [sys.executable, "-m", "ddtree_jax.cli.convert", f"--hf_dir={hf_dir}", f"--drafter_dir={drafter_dir}",
       f"--out_dir={out_dir}", "--dtype=float32", "--noprogress"]
env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
r = subprocess.run(cmd, capture_output=True, text=True, env=env)
print("$ ddtree-convert", " ".join(cmd[3:]))
print(r.stdout.strip() or r.stderr[-2000:])
assert r.returncode == 0
print(sorted(os.listdir(out_dir)))'''),
    new_markdown_cell("""## Load the converted directory and generate"""),
    new_code_cell('''\
import jax.numpy as jnp
from ddtree_jax.cli.common import load_models
from ddtree_jax.engine import Engine

target, tcfg, drafter, dcfg, tok, label = load_models(out_dir, out_dir, jnp.float32, want_drafter=True)
print("loaded", label, "| tokenizer:", tok)
engine = Engine(target, tcfg, drafter, dcfg)
r = engine.generate([[5, 6, 7, 8]], mode="ddtree", budget=6, max_new_tokens=8)[0]
print("token ids:", r.token_ids, "| tau", round(r.tau, 2))'''),
    new_markdown_cell("""\
## Will the real K2.6 fit? `ddtree-plan` for 8 GPUs
`ddtree-plan` needs no devices: it builds the abstract K2.6 model (61 layers, 384 INT4 experts) plus the
K2.5/K2.6 DFlash drafter shape, applies the sharding rules of `ddtree_jax/sharding.py` to a 1x8 mesh and
adds caches and activations. Below: 8 x H200 (141 GB) and 8 x RTX PRO 6000 (96 GB) at a 32K and a 128K
context. Exit status 0 = fits, 1 = does not fit (with what to change)."""),
    new_code_cell('''\
import shutil
plan_cli = shutil.which("ddtree-plan") or None
for gb, context in ((141, "32K"), (141, "128K"), (96, "32K"), (96, "128K")):
    args = ["--config=kimi_k2_6", "--mesh=1x8", f"--device_memory_gb={gb}", f"--context={context}", "--budget=32"]
    cmd = [plan_cli] + args if plan_cli else [sys.executable, "-m", "ddtree_jax.cli.plan"] + args
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(env, JAX_PLATFORMS="cpu"))
    print(f"$ ddtree-plan {' '.join(args)}   (exit {r.returncode})")
    print((r.stdout + r.stderr).strip(), "\\n")'''),
    new_markdown_cell("""\
For reference, the parameter count of the K2.6 preset (`configs/kimi_k2_6.py`) that the plan starts from:"""),
    new_code_cell('''\
from configs import kimi_k2_6
from ddtree_jax.model.size import size_report
r = size_report(kimi_k2_6.get_config())
print(f"parameters {r.total_params / 1e9:,.1f} B ({r.active_params_per_token / 1e9:.1f} B active per token, "
      f"{r.routed_expert_params / 1e9:,.1f} B in routed experts)")
print(f"on disk {r.bytes_on_disk / 1e9:,.1f} GB (INT4 experts); latent cache {r.latent_cache_bytes_per_token:,d} B/token")'''),
]

KERNELS = [
    new_markdown_cell("""\
# Kernels against the roofline (H200 measurements)

The numbers are the ones recorded in `benchmarks/RESULTS.md` (measured on one H200 with
`benchmarks/kernels.py` and `benchmarks/tree_kernels.py`), stored machine-readably in
`benchmarks/results/kernels_h200.json`. This notebook only plots them; it needs no GPU.

Caveat from RESULTS.md: the copy bandwidth (2.45 TB/s) and bf16 matmul rate (559 TFLOP/s) measured in that
run are below the H200's figures (4.13 TB/s, 787 TFLOP/s); both ceilings are drawn."""),
    new_code_cell(SETUP),
    new_code_cell('''\
import json
import numpy as np
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from IPython.display import Image, display

data = json.load(open(os.path.join(ROOT, "benchmarks", "results", "kernels_h200.json")))
ceil = data["ceilings"]
print(data["date"], "|", data["machine"])
print(len(data["mla"]["rows"]), "MLA rows,", len(data["moe_int4"]["rows"]), "MoE rows,", len(data["tree"]["rows"]), "tree rows")

def show(fig, name):
    fig.savefig(name, dpi=100, bbox_inches="tight")
    plt.close(fig)
    display(Image(name))'''),
    new_markdown_cell("""\
## MLA tree attention: classic roofline
Each point is one shape (B, T queries, H heads, context); arithmetic intensity = FLOPs / bytes moved,
both recovered from the measured time and the achieved TFLOP/s and TB/s. T=1 is decode (memory-bound),
T = N+1 is a tree verify."""),
    new_code_cell('''\
rows = data["mla"]["rows"]
flops = np.array([r["achieved_TFLOPps"] * 1e12 * r["pallas_ms"] * 1e-3 for r in rows])
bytes_ = np.array([r["achieved_TBps"] * 1e12 * r["pallas_ms"] * 1e-3 for r in rows])
ai = flops / bytes_
perf = np.array([r["achieved_TFLOPps"] for r in rows])
xla_perf = flops / (np.array([r["xla_bf16_ms"] for r in rows]) * 1e-3) / 1e12

fig, ax = plt.subplots(figsize=(7.5, 5))
x = np.logspace(0, 4.5, 200)
for bw, peak, style, tag in ((ceil["measured_copy_TBps"], ceil["measured_bf16_matmul_TFLOPps"], "-", "measured"),
                             (ceil["reference_hbm_TBps"], ceil["reference_bf16_TFLOPps"], ":", "H200 datasheet")):
    ax.plot(x, np.minimum(bw * x, peak), "k" + style, lw=1.2, label=f"roofline, {tag} ({bw} TB/s, {peak:.0f} TFLOP/s)")
colours = {1: "tab:blue", 16: "tab:orange", 64: "tab:green", 257: "tab:red"}
for t, c in colours.items():
    m = np.array([r["T"] == t for r in rows])
    ax.scatter(ai[m], perf[m], c=c, s=40, label=f"Pallas, T={t}", zorder=3)
    ax.scatter(ai[m], xla_perf[m], c=c, s=25, marker="x", alpha=0.6, zorder=3)
ax.scatter([], [], c="gray", marker="x", label="plain XLA (same shapes)")
ax.set_xscale("log"); ax.set_yscale("log")
ax.set_xlabel("arithmetic intensity (FLOP / byte)"); ax.set_ylabel("TFLOP/s")
ax.set_title("MLA tree attention on H200 (bf16 latent cache)")
ax.legend(fontsize=7, loc="lower right"); ax.grid(True, which="both", alpha=0.2)
show(fig, "kernels_mla_roofline.png")'''),
    new_code_cell('''\
fig, ax = plt.subplots(figsize=(7.5, 3.5))
labels = [f"B{r['B']} T{r['T']} H{r['H']}\\n{r['ctx'] // 1024}K" for r in rows]
frac = [r["frac_roofline_measured"] for r in rows]
frac2 = [r.get("frac_roofline_r2", np.nan) for r in rows]     # second round (corrected harness), where measured
colour = ["tab:blue" if r["bound"] == "memory" else "tab:red" for r in rows]
ax.bar(np.arange(len(rows)) - 0.2, frac, width=0.4, color=colour, alpha=0.4, label="first round")
ax.bar(np.arange(len(rows)) + 0.2, frac2, width=0.4, color=colour, label="second round (corrected timing)")
ax.axhline(0.8, color="tab:blue", ls="--", lw=1, label="target, memory-bound (0.8)")
ax.axhline(0.6, color="tab:red", ls="--", lw=1, label="target, compute-bound (0.6)")
ax.set_xticks(range(len(rows)), labels, fontsize=6, rotation=90)
ax.set_ylabel("fraction of roofline\\n(measured ceilings)"); ax.set_ylim(0, 1)
ax.set_title("MLA: fraction of the roofline per shape (blue: memory-bound, red: compute-bound; each round's ceilings)")
ax.legend(fontsize=7)
show(fig, "kernels_mla_fraction.png")'''),
    new_markdown_cell("""\
## INT4 MoE over the whole token range (issue 6, tenth, twelfth and fifteenth rounds)
`benchmarks/plot_moe.py` draws the dispatched kernels on the expert arrays k-chunked as the engine lays them out
on a GPU (1-8 tokens from the fifteenth round's final call, `benchmarks/results/issue6_r15/call5/`; 10-16 from the
twelfth's, `benchmarks/results/issue6_r12/call5/`; the rest from `benchmarks/results/issue6_r10/call3/`; queued samples
so host dispatch overlaps the device) against the twelfth round's dispatch, the memory roofline (INT4 weights
and scales of the experts hit / measured copy bandwidth), the compute roofline and REFERENCE.md's bf16 baselines. Memory-bound up to ~1K tokens; the 0.75 target applies to
1-64 tokens."""),
    new_code_cell('''\
from benchmarks.plot_moe import _dispatched, moe_figure

results = os.path.join(ROOT, "benchmarks", "results")
runs = [os.path.join(results, "issue6_r15", "call5", "moe", "kernels.json"),      # 1-8 tokens, final defaults
        os.path.join(results, "issue6_r12", "call5", "moe", "kernels.json"),      # 10-16 tokens
        os.path.join(results, "issue6_r10", "call3", "moe", "kernels.json")]      # the whole range
fig = moe_figure(runs, (), runs[1], k_chunk=256, earlier_k_chunk=256, earlier_label="twelfth round (k-chunked)")
show(fig, "kernels_moe.png")
for r in _dispatched(runs, k_chunk=256):
    print(f"M={r['M']:5d}: {r['time_s'] * 1e3:.3f} ms = {r['frac_roofline']:.0%} of the roofline, "
          f"{r['bytes'] / r['time_s'] / 1e12:.2f} TB/s of INT4 weights")'''),
    new_markdown_cell("""\
Round 29, on an H100 (no H200 could be started): the grouped kernels' two launches as one grid
(`custom_calls/moe_int4/pallas_triton_pipelined.py`), which the dispatch runs at 7-512 tokens, against the round-28
dispatch in the same runs (dotted)."""),
    new_code_cell('''\
r29 = [os.path.join(results, "issue6_r29", f"call{c}", "t", "kernels.json") for c in (2, 3, 4, 5)]
fig = moe_figure(r29, (), r29, k_chunk=256, earlier_k_chunk=256, final_kernel="grouped_one_launch",
                 final_label="grouped kernels in one launch", earlier_label="round-28 dispatch, same runs",
                 device="H100 (round 29)")
show(fig, "kernels_moe_r29.png")'''),
    new_markdown_cell("""\
## Tree build and walk
These move a few KB and are latency-bound; the figure of merit is the time they add to a round."""),
    new_code_cell('''\
rows = data["tree"]["rows"]
fig, ax = plt.subplots(figsize=(7, 3.8))
for b, ls in ((1, "-"), (8, "--")):
    rs = [r for r in rows if r["B"] == b]
    n = [r["N"] for r in rs]
    ax.plot(n, [r["build_xla_ms"] for r in rs], "tab:red", ls=ls, marker="o", label=f"build, XLA fori_loop, B={b}")
    ax.plot(n, [r["build_pallas_ms"] for r in rs], "tab:green", ls=ls, marker="o", label=f"build, Pallas, B={b}")
    ax.plot(n, [r["walk_pallas_ms"] for r in rs], "tab:blue", ls=ls, marker=".", label=f"walk, Pallas, B={b}")
ax.set_xscale("log", base=2); ax.set_yscale("log")
ax.set_xlabel("tree budget N"); ax.set_ylabel("ms per call (dispatch included)")
ax.set_title("DDTree build and walk on H200"); ax.legend(fontsize=7)
show(fig, "kernels_tree.png")'''),
]


NOTEBOOKS = {"quickstart.ipynb": QUICKSTART, "kimi_k26_checkpoint.ipynb": CHECKPOINT, "kernels.ipynb": KERNELS}


def write(name, cells, out_dir=HERE):
  nb = new_notebook(cells=cells)
  nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
  nb.metadata["language_info"] = {"name": "python"}
  for i, c in enumerate(nb.cells):   # stable ids: regenerating gives the same file
    c["id"] = f"{os.path.splitext(name)[0]}-{i}"
  nbformat.validate(nb)
  nbformat.write(nb, os.path.join(out_dir, name))


if __name__ == "__main__":
  for name, cells in NOTEBOOKS.items():
    write(name, cells)
  print("wrote", ", ".join(sorted(f for f in os.listdir(HERE) if f.endswith(".ipynb"))))
