"""Independent numpy re-implementation of the DeepSeek-V3 forward, written from the official DeepSeek-V3
conventions (not from transformers' code), used to confirm the conventions documented in README.md.

Needs only numpy + safetensors (no torch, no transformers), so tests may import it:

    python3 tests/golden/numpy_reference.py          # checks all cases against golden.npz

Conventions (all confirmed by matching transformers 5.24.0's logits to ~1e-5):
- RoPE: interleaved pairs (x[2i], x[2i+1]) rotated by inv_freq[i] (official complex-multiply form), applied
  in place; q_pe and k_pe use the same layout so the dot product is what HF computes (HF outputs the rotated
  pairs de-interleaved as [evens | odds], a permutation that cancels in q.k).
- q_a_layernorm / kv_a_layernorm eps = 1e-6 (NOT rms_norm_eps); all other norms rms_norm_eps.
- softmax scale = (qk_nope+qk_rope)^-0.5 * mscale(factor, mscale_all_dim)^2.
- YaRN inv_freq with floor/ceil-truncated correction range; cos/sin multiplied by
  mscale(factor, mscale)/mscale(factor, mscale_all_dim) (= 1.0 when both are 1).
- noaux_tc router as in DeepSeek-V3.
"""

from __future__ import annotations

import json
import math
import os

import numpy as np
from safetensors.numpy import load_file

HERE = os.path.dirname(os.path.abspath(__file__))


def rmsnorm(x, w, eps):
    x = x.astype(np.float32)
    return w * (x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps))


def silu(x):
    return x / (1.0 + np.exp(-x))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def yarn_mscale(scale, m):
    return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0


def yarn_inv_freq(cfg):
    rs = cfg.get("rope_scaling") or cfg["rope_parameters"]
    dim, base = cfg["qk_rope_head_dim"], cfg.get("rope_theta") or rs["rope_theta"]
    factor, L = rs["factor"], rs["original_max_position_embeddings"]
    bf, bs = rs.get("beta_fast", 32), rs.get("beta_slow", 1)
    freqs = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float32) / dim))

    def corr_dim(r):
        return dim * math.log(L / (r * 2 * math.pi)) / (2 * math.log(base))

    low, high = max(math.floor(corr_dim(bf)), 0), min(math.ceil(corr_dim(bs)), dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - low) / (high - low), 0, 1)
    smooth = 1 - ramp
    inv = freqs / factor * (1 - smooth) + freqs * smooth
    att = yarn_mscale(factor, rs.get("mscale", 1)) / yarn_mscale(factor, rs.get("mscale_all_dim", 1))
    return inv.astype(np.float32), att


def rope_interleaved(x, pos, inv, att):
    # x [..., T, d]; pairs (2i, 2i+1) rotated by angle pos*inv[i]
    ang = pos[:, None].astype(np.float32) * inv[None, :]
    c, s = np.cos(ang) * att, np.sin(ang) * att
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = x1 * c - x2 * s
    out[..., 1::2] = x2 * c + x1 * s
    return out


def router(x, W, bias, cfg):
    E, k = cfg["n_routed_experts"], cfg["num_experts_per_tok"]
    G, tg = cfg["n_group"], cfg["topk_group"]
    s = sigmoid(x @ W.T)
    sc = s + bias
    gs = np.sort(sc.reshape(-1, G, E // G), -1)[..., -2:].sum(-1)
    keep = np.argsort(-gs, -1, kind="stable")[:, :tg]
    gmask = np.zeros_like(gs, dtype=bool)
    np.put_along_axis(gmask, keep, True, -1)
    sc = np.where(np.repeat(gmask, E // G, -1), sc, -np.inf)
    idx = np.argsort(-sc, -1, kind="stable")[:, :k]
    w = np.take_along_axis(s, idx, -1)
    if cfg["norm_topk_prob"]:
        w = w / (w.sum(-1, keepdims=True) + 1e-20)
    return idx, w * cfg["routed_scaling_factor"]


def forward(cfg, W, ids):
    """ids [B, T] int -> (logits [B,T,V], hidden_states list like HF's output_hidden_states)."""
    B, T = ids.shape
    H, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    dn, dr, dv, kr = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"], cfg["kv_lora_rank"]
    eps = cfg["rms_norm_eps"]
    inv, att = yarn_inv_freq(cfg)
    rs = cfg.get("rope_scaling") or cfg["rope_parameters"]
    scale = (dn + dr) ** -0.5 * yarn_mscale(rs["factor"], rs.get("mscale_all_dim", 1)) ** 2
    pos = np.arange(T)
    causal = np.tril(np.ones((T, T), bool))
    h = W["model.embed_tokens.weight"][ids]
    hs = [h]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        x = rmsnorm(h, W[p + "input_layernorm.weight"], eps)
        a = p + "self_attn."
        q = rmsnorm(x @ W[a + "q_a_proj.weight"].T, W[a + "q_a_layernorm.weight"], 1e-6) @ W[a + "q_b_proj.weight"].T
        q = q.reshape(B, T, nh, dn + dr).transpose(0, 2, 1, 3)
        q_nope, q_pe = q[..., :dn], rope_interleaved(q[..., dn:], pos, inv, att)
        ckv = x @ W[a + "kv_a_proj_with_mqa.weight"].T
        c, k_pe = rmsnorm(ckv[..., :kr], W[a + "kv_a_layernorm.weight"], 1e-6), ckv[..., kr:]
        k_pe = rope_interleaved(k_pe, pos, inv, att)  # [B, T, dr], one head shared by all
        # absorbed MLA: W_UK / W_UV from kv_b_proj viewed [nh, dn+dv, kr]
        wkv = W[a + "kv_b_proj.weight"].reshape(nh, dn + dv, kr)
        q_lat = np.einsum("bhtd,hdc->bhtc", q_nope, wkv[:, :dn])
        sc = (np.einsum("bhtc,bsc->bhts", q_lat, c) + np.einsum("bhtd,bsd->bhts", q_pe, k_pe)) * scale
        sc = np.where(causal, sc, -np.inf)
        sc = np.exp(sc - sc.max(-1, keepdims=True))
        pr = sc / sc.sum(-1, keepdims=True)
        o = np.einsum("bhtc,hdc->bhtd", np.einsum("bhts,bsc->bhtc", pr, c), wkv[:, dn:])
        h = h + o.transpose(0, 2, 1, 3).reshape(B, T, nh * dv) @ W[a + "o_proj.weight"].T
        x = rmsnorm(h, W[p + "post_attention_layernorm.weight"], eps)
        m = p + "mlp."

        def mlp(z, pre):
            return (silu(z @ W[pre + "gate_proj.weight"].T) * (z @ W[pre + "up_proj.weight"].T)) @ W[pre + "down_proj.weight"].T

        if i < cfg["first_k_dense_replace"]:
            y = mlp(x, m)
        else:
            xf = x.reshape(-1, H)
            idx, w = router(xf, W[m + "gate.weight"], W[m + "gate.e_score_correction_bias"], cfg)
            y = mlp(xf, m + "shared_experts.")
            for t in range(xf.shape[0]):
                for j in range(idx.shape[1]):
                    y[t] += w[t, j] * mlp(xf[t], m + f"experts.{idx[t, j]}.")
            y = y.reshape(B, T, H)
        h = h + y
        hs.append(h)
    hn = rmsnorm(h, W["model.norm.weight"], eps)
    hs[-1] = hn  # HF returns the final-normed state as the last hidden_states entry
    return hn @ W["lm_head.weight"].T, hs


def load_case(case):
    d = os.path.join(HERE, case)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    return cfg, load_file(os.path.join(d, "model.safetensors")), np.load(os.path.join(d, "golden.npz"))


def main():
    for case in ("base", "grouped", "nonorm"):
        cfg, W, g = load_case(case)
        logits, hs = forward(cfg, W, g["input_ids"])
        err = np.abs(logits - g["logits"]).max()
        herr = max(np.abs(a - b).max() for a, b in zip(hs, g["hidden_states"]))
        # greedy without cache
        seq = g["greedy_prompt"].astype(np.int64)
        for _ in range(g["greedy_tokens"].shape[1]):
            lg, _ = forward(cfg, W, seq)
            seq = np.concatenate([seq, lg[:, -1].argmax(-1)[:, None]], 1)
        ok_greedy = np.array_equal(seq[:, g["greedy_prompt"].shape[1]:], g["greedy_tokens"])
        print(f"{case}: max|logits-golden| {err:.2e}, max|hidden-golden| {herr:.2e}, greedy match {ok_greedy}")
        assert err < 1e-3 and herr < 1e-3 and ok_greedy, case


if __name__ == "__main__":
    main()
