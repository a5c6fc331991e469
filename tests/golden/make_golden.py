"""Golden parity files from HF transformers' DeepseekV3ForCausalLM (independent reference).

transformers is NOT a test-time dependency of ddtree-jax: this script is run once, by hand, and its
outputs (tests/golden/<case>/{config.json, model.safetensors, golden.npz}) are committed.

How to run (from the repository root):

    python3 -m venv /tmp/hfvenv            # Python 3.11
    /tmp/hfvenv/bin/pip install torch==2.13.0 transformers==5.24.0 safetensors numpy
    /tmp/hfvenv/bin/python tests/golden/make_golden.py            # writes all cases
    /tmp/hfvenv/bin/python tests/golden/make_golden.py --check    # regenerate in memory, compare to files

The files were produced with torch 2.13.0+cpu and transformers 5.24.0 (see README.md). Everything is
float32 on CPU, eager attention, fixed seeds, so re-running reproduces the same bytes on the same
versions (up to CPU-kernel float noise in the outputs).

What it does for each case:
  1. builds a tiny DeepseekV3Config (hidden 64, 3 layers, 4 heads, MLA ranks 32/32, rope dim 8,
     8 routed experts top-2 + 1 shared, vocab 160, YaRN rope, rope_interleave=True);
  2. draws random float32 weights with numpy (fixed seed) under the REAL per-expert checkpoint naming
     (`model.layers.{i}.mlp.experts.{e}.{gate,up,down}_proj.weight`, `model.layers.{i}.mlp.gate.weight`,
     `...gate.e_score_correction_bias`, `lm_head.weight`, ...), writes them with safetensors;
  3. loads the directory with `DeepseekV3ForCausalLM.from_pretrained` (transformers fuses the per-expert
     tensors into its 3-D `experts.gate_up_proj` / `experts.down_proj` while loading) and checks that
     no key is missing/unexpected and that every loaded parameter equals the file (after fusing);
  4. cross-checks from_pretrained against a model built from the config with the fused weights set by
     hand (identical logits), and checks greedy-with-cache == greedy-without-cache;
  5. records golden.npz: input_ids [2,12] int32, logits [2,12,V] f32, hidden_states [L+1,2,12,H] f32
     (HF `output_hidden_states`: [0] = embeddings, [i] = residual stream after layer i-1 for i < L,
     [L] = final-NORMED output, exactly as HF returns it), last_layer_prenorm [2,12,H] (output of the last
     decoder layer before model.norm, captured with a hook), greedy_prompt [1,5] int32, greedy_tokens
     [1,10] int32 (HF generate, do_sample=False, use_cache=True), plus router diagnostics for layers
     >= first_k_dense_replace on the input_ids forward: router_topk_idx [n_moe, 24, k] (sorted
     ascending per token) and router_topk_w [n_moe, 24, k] (weights in the same order).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys

import numpy as np
import torch
from safetensors.numpy import save_file

import transformers
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))

COMMON = dict(
    vocab_size=160,
    hidden_size=64,
    intermediate_size=96,
    moe_intermediate_size=32,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=4,
    n_shared_experts=1,
    n_routed_experts=8,
    num_experts_per_tok=2,
    routed_scaling_factor=2.5,
    kv_lora_rank=32,
    q_lora_rank=32,
    qk_rope_head_dim=8,
    v_head_dim=16,
    qk_nope_head_dim=16,
    hidden_act="silu",
    max_position_embeddings=4096,
    rms_norm_eps=1e-5,
    tie_word_embeddings=False,
    rope_interleave=True,
    attention_bias=False,
    num_nextn_predict_layers=0,
    bos_token_id=0,
    eos_token_id=1,
)

# scoring_func / topk_method are not read by transformers' DeepseekV3 (it always does sigmoid + noaux_tc);
# they are written into config.json because real checkpoints carry them.
EXTRA_CONFIG_KEYS = dict(scoring_func="sigmoid", topk_method="noaux_tc", moe_layer_freq=1)

CASES = {
    # the brief's YaRN: factor 8, original 32 -> rope ramp (low, high) = (0, 1): dim-pair 0 extrapolated,
    # pairs 1..3 interpolated (divided by the factor).
    "base": dict(
        n_group=1, topk_group=1, first_k_dense_replace=1, norm_topk_prob=True,
        rope=dict(factor=8.0, original_max_position_embeddings=32), seed=1008,
    ),
    # original 256 -> ramp (low, high) = (0, 2): ramp = [0, .5, 1, 1], exercises a fractional blend.
    "grouped": dict(
        n_group=4, topk_group=2, first_k_dense_replace=2, norm_topk_prob=True,
        rope=dict(factor=8.0, original_max_position_embeddings=256), seed=2002,
    ),
    # larger factor (mscale differs more from 1).
    "nonorm": dict(
        n_group=2, topk_group=1, first_k_dense_replace=1, norm_topk_prob=False,
        rope=dict(factor=40.0, original_max_position_embeddings=32), seed=3003,
    ),
}

SEQ = 12
BATCH = 2
PROMPT_LEN = 5
NEW_TOKENS = 10


def make_config(case: dict) -> DeepseekV3Config:
    rope = dict(
        rope_type="yarn", rope_theta=50000.0, factor=case["rope"]["factor"],
        original_max_position_embeddings=case["rope"]["original_max_position_embeddings"],
        beta_fast=32, beta_slow=1, mscale=1.0, mscale_all_dim=1.0,
    )
    cfg = DeepseekV3Config(
        **COMMON,
        n_group=case["n_group"], topk_group=case["topk_group"],
        first_k_dense_replace=case["first_k_dense_replace"], norm_topk_prob=case["norm_topk_prob"],
        rope_parameters=rope,
        architectures=["DeepseekV3ForCausalLM"],
    )
    return cfg


def make_weights(cfg: DeepseekV3Config, seed: int) -> dict[str, np.ndarray]:
    """Random fp32 weights under the real per-expert checkpoint names."""
    rng = np.random.default_rng(seed)
    f32 = np.float32
    H, V = cfg.hidden_size, cfg.vocab_size
    nh, dn, dr, dv = cfg.num_attention_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
    qr, kr = cfg.q_lora_rank, cfg.kv_lora_rank
    E, I, Im = cfg.n_routed_experts, cfg.intermediate_size, cfg.moe_intermediate_size

    def lin(out, inp, gain=1.0):
        # std ~ gain / sqrt(fan_in): keeps activations O(1) so nothing saturates or vanishes
        return (rng.standard_normal((out, inp)) * (gain / math.sqrt(inp))).astype(f32)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(f32)

    w: dict[str, np.ndarray] = {}
    w["model.embed_tokens.weight"] = rng.standard_normal((V, H)).astype(f32)
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm(H)
        w[p + "post_attention_layernorm.weight"] = norm(H)
        a = p + "self_attn."
        # q_a_proj and the c_kv rows of kv_a_proj_with_mqa get a SMALL gain (output rms ~0.02, mean square
        # ~4e-4) so that the eps of q_a_layernorm / kv_a_layernorm (1e-6 in HF vs rms_norm_eps 1e-5) changes
        # the logits visibly (~1e-2) instead of ~1e-4; the norms rescale to O(1) right after.
        w[a + "q_a_proj.weight"] = lin(qr, H, 0.02)
        w[a + "q_a_layernorm.weight"] = norm(qr)
        w[a + "q_b_proj.weight"] = lin(nh * (dn + dr), qr, 1.5)
        w[a + "kv_a_proj_with_mqa.weight"] = np.concatenate([lin(kr, H, 0.02), lin(dr, H, 1.5)], 0)
        w[a + "kv_a_layernorm.weight"] = norm(kr)
        w[a + "kv_b_proj.weight"] = lin(nh * (dn + dv), kr)
        w[a + "o_proj.weight"] = lin(H, nh * dv, 0.7)
        m = p + "mlp."
        if i < cfg.first_k_dense_replace:
            w[m + "gate_proj.weight"] = lin(I, H)
            w[m + "up_proj.weight"] = lin(I, H)
            w[m + "down_proj.weight"] = lin(H, I, 0.7)
        else:
            # sigmoid(x @ Wg^T) with x ~ unit-rms: std 2/sqrt(H) gives logits ~N(0, 2^2 * |x|^2/H) -> spread scores
            w[m + "gate.weight"] = lin(E, H, 2.0)
            w[m + "gate.e_score_correction_bias"] = (0.1 * rng.standard_normal(E)).astype(f32)
            for e in range(E):
                w[m + f"experts.{e}.gate_proj.weight"] = lin(Im, H)
                w[m + f"experts.{e}.up_proj.weight"] = lin(Im, H)
                w[m + f"experts.{e}.down_proj.weight"] = lin(H, Im, 0.5)
            Is = Im * cfg.n_shared_experts
            w[m + "shared_experts.gate_proj.weight"] = lin(Is, H)
            w[m + "shared_experts.up_proj.weight"] = lin(Is, H)
            w[m + "shared_experts.down_proj.weight"] = lin(H, Is, 0.5)
    w["model.norm.weight"] = norm(H)
    w["lm_head.weight"] = lin(V, H, 3.0)
    # Round every weight except e_score_correction_bias (fp32 in real checkpoints) to a bf16-representable
    # value (round-to-nearest-even), still stored as float32: a bf16 weight path can then load them exactly.
    for k, v in w.items():
        if not k.endswith("e_score_correction_bias"):
            w[k] = _round_bf16(v)
    return w


def _round_bf16(x: np.ndarray) -> np.ndarray:
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


def fused_state_dict(cfg: DeepseekV3Config, w: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """Per-expert names -> transformers' internal fused layout (done by hand, independent of the loader)."""
    sd: dict[str, torch.Tensor] = {}
    E = cfg.n_routed_experts
    for k, v in w.items():
        if ".mlp.experts." in k:
            continue
        sd[k] = torch.from_numpy(v.copy())
    for i in range(cfg.first_k_dense_replace, cfg.num_hidden_layers):
        m = f"model.layers.{i}.mlp.experts."
        gate_up = [np.concatenate([w[m + f"{e}.gate_proj.weight"], w[m + f"{e}.up_proj.weight"]], 0) for e in range(E)]
        sd[m + "gate_up_proj"] = torch.from_numpy(np.stack(gate_up, 0))
        sd[m + "down_proj"] = torch.from_numpy(np.stack([w[m + f"{e}.down_proj.weight"] for e in range(E)], 0))
    return sd


def write_config(cfg: DeepseekV3Config, out_dir: str) -> None:
    cfg.save_pretrained(out_dir)
    path = os.path.join(out_dir, "config.json")
    with open(path) as f:
        d = json.load(f)
    rp = d["rope_parameters"]
    # transformers 5 writes only `rope_parameters`; real DeepSeek-V3 / Kimi K2 configs carry the legacy
    # top-level `rope_theta` + `rope_scaling` instead. Write both (same values) so a loader that only
    # knows the real layout works too; from_pretrained accepts this file (verified below).
    d["rope_theta"] = rp["rope_theta"]
    d["rope_scaling"] = {
        "type": "yarn", "factor": rp["factor"],
        "original_max_position_embeddings": rp["original_max_position_embeddings"],
        "beta_fast": rp["beta_fast"], "beta_slow": rp["beta_slow"],
        "mscale": rp["mscale"], "mscale_all_dim": rp["mscale_all_dim"],
    }
    d.update(EXTRA_CONFIG_KEYS)
    d["architectures"] = ["DeepseekV3ForCausalLM"]
    d["torch_dtype"] = "float32"
    with open(path, "w") as f:
        json.dump(dict(sorted(d.items())), f, indent=2)
        f.write("\n")


def router_diag(model, cfg, captured_inputs):
    idxs, wts, margins = [], [], []
    for li in range(cfg.first_k_dense_replace, cfg.num_hidden_layers):
        gate = model.model.layers[li].mlp.gate
        x = captured_inputs[li]
        with torch.no_grad():
            _, w, idx = gate(x)
            # selection margin diagnostics (how robust the top-k choice is to float noise)
            s = torch.sigmoid(x.view(-1, cfg.hidden_size).float() @ gate.weight.float().T)
            sc = s + gate.e_score_correction_bias
            G = cfg.n_group
            gs = sc.view(-1, G, cfg.n_routed_experts // G).topk(2, dim=-1)[0].sum(-1)
            if G > cfg.topk_group:
                gsort = gs.sort(-1, descending=True)[0]
                margins.append(float((gsort[:, cfg.topk_group - 1] - gsort[:, cfg.topk_group]).min()))
            gidx = gs.topk(cfg.topk_group, dim=-1)[1]
            gmask = torch.zeros_like(gs).scatter_(1, gidx, 1).repeat_interleave(cfg.n_routed_experts // G, 1)
            scm = sc.masked_fill(gmask == 0, float("-inf")).sort(-1, descending=True)[0]
            k = cfg.num_experts_per_tok
            margins.append(float((scm[:, k - 1] - scm[:, k]).min()))
        order = idx.sort(-1)
        idxs.append(order.values.numpy().astype(np.int32))
        wts.append(torch.gather(w, 1, order.indices).numpy().astype(np.float32))
    return np.stack(idxs), np.stack(wts), min(margins)


def run_case(name: str, case: dict, out_dir: str, check_only: bool = False) -> dict[str, np.ndarray]:
    torch.manual_seed(case["seed"])
    cfg = make_config(case)
    w = make_weights(cfg, case["seed"])
    os.makedirs(out_dir, exist_ok=True)
    tmp_dir = out_dir if not check_only else out_dir + ".check_tmp"
    os.makedirs(tmp_dir, exist_ok=True)
    write_config(cfg, tmp_dir)
    save_file(w, os.path.join(tmp_dir, "model.safetensors"), metadata={"format": "pt"})

    # ---- load with from_pretrained (per-expert names -> fused, by transformers' conversion mapping)
    model, info = DeepseekV3ForCausalLM.from_pretrained(
        tmp_dir, dtype=torch.float32, attn_implementation="eager", output_loading_info=True
    )
    model.eval()
    bad = {k: v for k, v in info.items() if v}
    assert not bad, f"{name}: loading info not clean: {bad}"
    assert model.config.rope_interleave is True
    assert model.config.rope_parameters["rope_type"] == "yarn"

    # every loaded tensor equals what we wrote (after fusing by hand)
    ref_sd = fused_state_dict(cfg, w)
    msd = model.state_dict()
    for k, v in ref_sd.items():
        assert k in msd, f"{name}: {k} missing from model"
        assert msd[k].dtype == torch.float32, (k, msd[k].dtype)
        assert torch.equal(msd[k], v), f"{name}: {k} differs after load"
    extra = set(msd) - set(ref_sd)
    assert not extra, f"{name}: model has tensors not in file: {extra}"

    # independent model: config object + hand-fused weights
    model2 = DeepseekV3ForCausalLM(make_config(case))
    model2.config._attn_implementation = "eager"
    model2.to(torch.float32)
    missing, unexpected = model2.load_state_dict(ref_sd, strict=True)
    model2.eval()

    rng = np.random.default_rng(case["seed"] + 7)
    input_ids = rng.integers(2, cfg.vocab_size, size=(BATCH, SEQ)).astype(np.int32)
    greedy_prompt = rng.integers(2, cfg.vocab_size, size=(1, PROMPT_LEN)).astype(np.int32)
    ids = torch.from_numpy(input_ids).long()

    captured = {}
    hooks = []
    for li in range(cfg.first_k_dense_replace, cfg.num_hidden_layers):
        hooks.append(model.model.layers[li].mlp.gate.register_forward_pre_hook(
            lambda mod, args, li=li: captured.__setitem__(li, args[0].detach().clone())))
    hooks.append(model.model.norm.register_forward_pre_hook(
        lambda mod, args: captured.__setitem__("prenorm", args[0].detach().clone())))
    with torch.no_grad():
        out = model(ids, output_hidden_states=True, use_cache=False)
    for h in hooks:
        h.remove()
    logits = out.logits.float().numpy()
    hs = np.stack([h.float().numpy() for h in out.hidden_states]).astype(np.float32)
    assert hs.shape == (cfg.num_hidden_layers + 1, BATCH, SEQ, cfg.hidden_size), hs.shape
    prenorm = captured["prenorm"].numpy().astype(np.float32)
    ridx, rw, rmargin = router_diag(model, cfg, captured)

    with torch.no_grad():
        logits2 = model2(ids, use_cache=False).logits.float().numpy()
    assert np.array_equal(logits, logits2), f"{name}: from_pretrained vs hand-fused logits differ " \
        f"(max {np.abs(logits - logits2).max()})"

    # greedy decode with cache (HF generate), cross-checked with a no-cache argmax loop
    gp = torch.from_numpy(greedy_prompt).long()
    with torch.no_grad():
        gen = model.generate(gp, attention_mask=torch.ones_like(gp), do_sample=False, max_new_tokens=NEW_TOKENS,
                             min_new_tokens=NEW_TOKENS, use_cache=True, eos_token_id=None, pad_token_id=0)
    greedy_tokens = gen[:, PROMPT_LEN:].numpy().astype(np.int32)
    assert greedy_tokens.shape == (1, NEW_TOKENS)
    seq = gp.clone()
    margins = []
    with torch.no_grad():
        for _ in range(NEW_TOKENS):
            lg = model(seq, use_cache=False).logits[0, -1]
            top2 = lg.topk(2).values
            margins.append(float(top2[0] - top2[1]))
            seq = torch.cat([seq, lg.argmax().view(1, 1)], 1)
    assert np.array_equal(seq[:, PROMPT_LEN:].numpy(), greedy_tokens), f"{name}: cached vs uncached greedy differ"

    golden = dict(
        input_ids=input_ids, logits=logits.astype(np.float32), hidden_states=hs,
        last_layer_prenorm=prenorm, greedy_prompt=greedy_prompt, greedy_tokens=greedy_tokens,
        router_topk_idx=ridx, router_topk_w=rw,
    )
    # stats
    am = logits.argmax(-1)
    print(f"[{name}] logits std {logits.std():.3f} absmax {np.abs(logits).max():.3f}, "
          f"distinct argmax {len(np.unique(am))}/{am.size}, greedy {greedy_tokens.tolist()} "
          f"(min top1-top2 margin {min(margins):.4f}), min router selection margin {rmargin:.5f}, "
          f"hidden absmax per layer {[round(float(np.abs(x).max()), 2) for x in hs]}")
    if check_only:
        shutil.rmtree(tmp_dir)
    else:
        np.savez_compressed(os.path.join(out_dir, "golden.npz"), **golden)
    return golden


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true", help="regenerate in memory and compare to committed files")
    ap.add_argument("cases", nargs="*", default=list(CASES))
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, numpy {np.__version__}")
    for name in args.cases:
        out_dir = os.path.join(HERE, name)
        g = run_case(name, CASES[name], out_dir, check_only=args.check)
        if args.check:
            ref = np.load(os.path.join(out_dir, "golden.npz"))
            for k, v in g.items():
                if v.dtype.kind == "i":
                    assert np.array_equal(ref[k], v), (name, k)
                else:
                    np.testing.assert_allclose(ref[k], v, rtol=1e-5, atol=1e-5, err_msg=f"{name}/{k}")
            print(f"[{name}] check OK")


if __name__ == "__main__":
    sys.exit(main())
