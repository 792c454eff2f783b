"""A plain numpy (float64) forward pass of the decoder, from a state dict and a config,
written from the equations (no riftco kernels), for comparison with the model."""

from __future__ import annotations

import math

import numpy as np

ERF = np.vectorize(math.erf)


def layer_norm(x, w, b, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def gelu(x, exact):
    if exact:
        return 0.5 * x * (1 + ERF(x / math.sqrt(2)))
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def rotate(x, theta):
    """x [T, H, Dh] at positions 0..T-1, rotate_half form."""
    t, _, dh = x.shape
    inv = 1.0 / theta ** (np.arange(0, dh, 2) / dh)
    ang = np.arange(t)[:, None] * inv[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x1, x2 = x[..., : dh // 2], x[..., dh // 2 :]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


def forward(state, c, tokens):
    """Logits [B, T, V] of int tokens [B, T]."""
    s = {
        k: np.asarray(v.numpy() if hasattr(v, "numpy") else v, dtype=np.float64)
        for k, v in state.items()
    }

    def lin(x, name):
        y = x @ s[f"{name}.weight"].T
        return y + s[f"{name}.bias"] if f"{name}.bias" in s else y

    def norm(x, name):
        if c.norm == "rms":
            return rms_norm(x, s[f"{name}.weight"], c.norm_eps)
        return layer_norm(x, s[f"{name}.weight"], s[f"{name}.bias"], c.norm_eps)

    tokens = np.asarray(tokens)
    out = []
    h, hkv, dh = c.n_heads, c.n_kv_heads, c.head_dim
    for seq in tokens:
        t = len(seq)
        x = s["token_embedding.weight"][seq]
        if c.positions == "learned":
            x = x + s["position_embedding.weight"][:t]
        pos = np.arange(t)
        visible = pos[None, :] <= pos[:, None]
        if c.sliding_window:
            visible &= pos[:, None] - pos[None, :] < c.sliding_window
        for i in range(c.n_layers):
            p = f"blocks.{i}"
            a_in = norm(x, f"{p}.attention_norm")
            q = lin(a_in, f"{p}.attention.query").reshape(t, h, dh)
            k = lin(a_in, f"{p}.attention.key").reshape(t, hkv, dh)
            v = lin(a_in, f"{p}.attention.value").reshape(t, hkv, dh)
            if c.positions == "rotary":
                q, k = rotate(q, c.rope_theta), rotate(k, c.rope_theta)
            heads = []
            for j in range(h):
                g = j // (h // hkv)
                scores = q[:, j] @ k[:, g].T / math.sqrt(dh)
                scores = np.where(visible, scores, -np.inf)
                e = np.exp(scores - scores.max(-1, keepdims=True))
                heads.append((e / e.sum(-1, keepdims=True)) @ v[:, g])
            x = x + lin(np.concatenate(heads, -1), f"{p}.attention.output")
            f_in = norm(x, f"{p}.feed_forward_norm")
            if c.feed_forward == "swiglu":
                gate = lin(f_in, f"{p}.feed_forward.gate")
                ff = (gate / (1 + np.exp(-gate))) * lin(f_in, f"{p}.feed_forward.up")
                x = x + lin(ff, f"{p}.feed_forward.down")
            else:
                ff = gelu(lin(f_in, f"{p}.feed_forward.expand"), c.gelu == "exact")
                x = x + lin(ff, f"{p}.feed_forward.project")
        x = norm(x, "final_norm")
        head = s["token_embedding.weight"] if c.tie_embeddings else s["language_model_head.weight"]
        logits = x @ head.T
        if "language_model_head.bias" in s:
            logits = logits + s["language_model_head.bias"]
        out.append(logits)
    return np.stack(out)
