#!/usr/bin/env python3
"""Prints the expected numbers of tests/nn/transformer_test.cpp, computed by
torch 1.13 (float64) on the same fixed parameters and inputs:

  ~/.cache/tessel-pyenv/bin/python tests/nn/transformer_reference.py

Parameters: the i-th parameter in named_parameters() order holds
pat(shape, 13 * i) * 0.2; inputs are pat(shape, off) (tests/nn/pattern_values.h).
torch 1.13 has no is_causal: the causal cases pass the equivalent bool mask
(true above the diagonal = not allowed)."""
import math

import torch

torch.set_default_dtype(torch.float64)
nn = torch.nn


def pat(shape, off=0):
    n = math.prod(shape)
    v = [((i * 37 + off) % 101 - 50) / 20.0 for i in range(n)]
    return torch.tensor(v).reshape(shape)


def set_params(m):
    with torch.no_grad():
        for i, (_, p) in enumerate(m.named_parameters()):
            p.copy_(pat(list(p.shape), 13 * i) * 0.2)
    return m


def causal(L, S):
    return torch.ones(L, S).triu(1).bool()


def emit(name, t):
    flat = [f"{float(v):.10g}" for v in t.detach().reshape(-1)]
    lines, line = [], "     "
    for f in flat:
        if len(line) + len(f) + 2 > 116:
            lines.append(line)
            line = "     "
        line += " " + f + ","
    lines.append(line)
    print(f"// {name} {list(t.shape)}")
    print("\n".join(lines))


def keys(name, m):
    print(f"// {name} keys: " + ", ".join(f'"{k}"' for k in m.state_dict()))


# --- MultiheadAttention: E 8, 2 heads, L 3, S 4, B 2, [L, B, E] ---
mha = set_params(nn.MultiheadAttention(8, 2))
keys("mha", mha)
keys("mha bias=False", nn.MultiheadAttention(8, 2, bias=False))
q, kv = pat([3, 2, 8], 5), pat([4, 2, 8], 9)
kpm = torch.tensor([[False, False, False, True], [False, True, False, False]])
am = torch.tensor([[False, True, False, False], [False, False, False, False], [True, False, False, False]])
y, w = mha(q, kv, kv, key_padding_mask=kpm, attn_mask=am, need_weights=True)
emit("mha cross, bool masks", y)
emit("mha cross weights (averaged)", w)
fmask = pat([3, 4], 3) * 0.5
emit("mha cross, float attn_mask", mha(q, kv, kv, attn_mask=fmask, need_weights=False)[0])
# Unbatched causal self-attention, batch_first.
mha_bf = set_params(nn.MultiheadAttention(8, 2, batch_first=True))
x = pat([3, 8], 7)
emit("mha unbatched causal self", mha_bf(x, x, x, attn_mask=causal(3, 3), need_weights=False)[0])
# 3-D float mask with bool key padding, batch_first [B, L, E]
xb = pat([2, 3, 8], 11)
m3 = pat([4, 3, 3], 2) * 0.5
kpm3 = torch.tensor([[False, False, True], [False, False, False]])
emit("mha batch_first 3-D float mask + kpm",
     mha_bf(xb, xb, xb, attn_mask=m3, key_padding_mask=kpm3, need_weights=False)[0])

# --- TransformerEncoderLayer ---
enc = set_params(nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0))
keys("encoder layer", enc)
src = pat([3, 2, 8], 4)
kpm_e = torch.tensor([[False, False, True], [False, False, False]])
emit("encoder layer post-norm relu, kpm", enc(src, src_key_padding_mask=kpm_e))
enc2 = set_params(nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, activation="gelu",
                                             batch_first=True, norm_first=True))
srcb = pat([2, 3, 8], 6)
emit("encoder layer pre-norm gelu batch_first causal", enc2(srcb, src_mask=causal(3, 3)))

# --- TransformerDecoderLayer ---
dec = set_params(nn.TransformerDecoderLayer(8, 2, dim_feedforward=16, dropout=0.0))
keys("decoder layer", dec)
tgt, mem = pat([3, 2, 8], 8), pat([4, 2, 8], 10)
mkpm = torch.tensor([[False, False, False, True], [True, False, False, False]])
emit("decoder layer causal tgt, memory kpm", dec(tgt, mem, tgt_mask=causal(3, 3), memory_key_padding_mask=mkpm))
dec2 = set_params(nn.TransformerDecoderLayer(8, 2, dim_feedforward=16, dropout=0.0, activation="gelu",
                                             batch_first=True, norm_first=True))
emit("decoder layer pre-norm gelu batch_first, float memory_mask",
     dec2(pat([2, 3, 8], 12), pat([2, 4, 8], 14), memory_mask=pat([3, 4], 1) * 0.5))

# --- TransformerEncoder: 2 layers + final norm ---
layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0)
encoder = set_params(nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(8), enable_nested_tensor=False))
keys("encoder", encoder)
emit("encoder 2 layers + norm, causal", encoder(pat([3, 2, 8], 15), mask=causal(3, 3)))

# --- gradients through an encoder layer: d_model 4, 2 heads, ff 6 ---
g = set_params(nn.TransformerEncoderLayer(4, 2, dim_feedforward=6, dropout=0.0))
gs = pat([3, 2, 4], 16).requires_grad_()
(g(gs, src_key_padding_mask=torch.tensor([[False, False, True], [False, False, False]])) * pat([3, 2, 4], 17)).sum().backward()
emit("grad src", gs.grad)
emit("grad self_attn.in_proj_weight", g.self_attn.in_proj_weight.grad)
emit("grad linear1.weight", g.linear1.weight.grad)
emit("grad norm1.weight", g.norm1.weight.grad)

# --- positional encoding [4, 6] (the formula, no torch module has it) ---
pe = torch.zeros(4, 6)
pos = torch.arange(4).unsqueeze(1).double()
div = torch.exp(torch.arange(0, 6, 2).double() * (-math.log(10000.0) / 6))
pe[:, 0::2] = torch.sin(pos * div)
pe[:, 1::2] = torch.cos(pos * div)
emit("sinusoidal_positional_encoding(4, 6)", pe)
pe5 = torch.zeros(3, 5)
pos = torch.arange(3).unsqueeze(1).double()
div = torch.exp(torch.arange(0, 5, 2).double() * (-math.log(10000.0) / 5))
pe5[:, 0::2] = torch.sin(pos * div)
pe5[:, 1::2] = torch.cos(pos * div[:2])
emit("sinusoidal_positional_encoding(3, 5)", pe5)
