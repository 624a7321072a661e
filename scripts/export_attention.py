#!/usr/bin/env python3
"""Writes tests/fixtures/attention.safetensors for tests/nn_attention.rs: PyTorch's
nn.MultiheadAttention (batch_first both ways, key padding and bool / float attention masks,
kdim/vdim != embed_dim), nn.TransformerEncoderLayer (pre-norm gelu causal, post-norm relu with
a key padding mask) and nn.TransformerEncoder (two pre-norm layers and a final norm), each
with its state dict, inputs, outputs, the input gradients and the parameter gradients of
sum(out * g) for a stored g. Every case is in eval mode (or dropout 0), so it is
deterministic. Needs torch and safetensors; the file is checked in, so the test needs neither.

Keys: `<case>.sd.<state dict name>`, `<case>.in.<input>`, `<case>.out`, `<case>.weights`
(need_weights=True), `<case>.g`, `<case>.grad.in.<input>`, `<case>.grad.sd.<parameter>`.
Bool masks are stored as bool (they load as i32; nonzero = masked out, as in PyTorch)."""
import os

import torch
from safetensors.torch import save_file
from torch import nn

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "attention.safetensors")


def record(tensors, case, module, inputs, run, weights=None):
    """Runs `run(**inputs)` -> out, backward of sum(out * g); stores everything under `case`."""
    for k, v in module.state_dict().items():
        tensors[f"{case}.sd.{k}"] = v.detach().clone().contiguous()
    leaf = {}
    for k, v in inputs.items():
        tensors[f"{case}.in.{k}"] = v.detach().clone().contiguous()
        if v.is_floating_point() and not k.endswith("mask"):
            leaf[k] = v.detach().clone().requires_grad_(True)
        else:
            leaf[k] = v
    out = run(**leaf)
    g = torch.randn_like(out)
    (out * g).sum().backward()
    tensors[f"{case}.out"] = out.detach().contiguous()
    tensors[f"{case}.g"] = g.contiguous()
    for k, v in leaf.items():
        if isinstance(v, torch.Tensor) and v.requires_grad:
            tensors[f"{case}.grad.in.{k}"] = v.grad.contiguous()
    for k, p in module.named_parameters():
        tensors[f"{case}.grad.sd.{k}"] = p.grad.contiguous()
    if weights is not None:
        with torch.no_grad():
            tensors[f"{case}.weights"] = weights(**leaf).contiguous()


def main():
    torch.manual_seed(0)
    t = {}
    E, H, L, S, N = 8, 2, 5, 6, 3

    # A: sequence-first cross attention, bool key padding mask [N, S] and bool attn_mask [L, S].
    mha = nn.MultiheadAttention(E, H).eval()
    kpm = torch.zeros(N, S, dtype=torch.bool)
    kpm[1, -1] = True
    kpm[2, -2:] = True
    am = torch.zeros(L, S, dtype=torch.bool)
    for i in range(L):
        for j in range(1, S):
            if (i + j) % 3 == 0:
                am[i, j] = True

    def run_a(query, key, value, key_padding_mask, attn_mask):
        return mha(query, key, value, key_padding_mask=key_padding_mask, attn_mask=attn_mask,
                   need_weights=False)[0]

    def weights_a(query, key, value, key_padding_mask, attn_mask):
        return mha(query, key, value, key_padding_mask=key_padding_mask, attn_mask=attn_mask)[1]

    record(t, "mha_a", mha, dict(query=torch.randn(L, N, E), key=torch.randn(S, N, E),
                                 value=torch.randn(S, N, E), key_padding_mask=kpm, attn_mask=am),
           run_a, weights_a)

    # B: batch-first self-attention with a float attn_mask [N * H, L, L]; weights per head.
    mha = nn.MultiheadAttention(E, H, batch_first=True).eval()

    def run_b(x, attn_mask):
        return mha(x, x, x, attn_mask=attn_mask, need_weights=False)[0]

    def weights_b(x, attn_mask):
        return mha(x, x, x, attn_mask=attn_mask, average_attn_weights=False)[1]

    record(t, "mha_b", mha, dict(x=torch.randn(N, L, E), attn_mask=torch.randn(N * H, L, L)),
           run_b, weights_b)

    # C: kdim / vdim != embed_dim (q_proj_weight, k_proj_weight, v_proj_weight), batch first,
    # bool key padding mask.
    mha = nn.MultiheadAttention(E, H, kdim=4, vdim=6, batch_first=True).eval()
    kpm = torch.zeros(N, S, dtype=torch.bool)
    kpm[0, 0] = True
    kpm[2, 3:] = True

    def run_c(query, key, value, key_padding_mask):
        return mha(query, key, value, key_padding_mask=key_padding_mask, need_weights=False)[0]

    def weights_c(query, key, value, key_padding_mask):
        return mha(query, key, value, key_padding_mask=key_padding_mask)[1]

    record(t, "mha_c", mha, dict(query=torch.randn(N, L, E), key=torch.randn(N, S, 4),
                                 value=torch.randn(N, S, 6), key_padding_mask=kpm),
           run_c, weights_c)

    # D: pre-norm, gelu, causal, batch first, dropout 0.
    layer = nn.TransformerEncoderLayer(E, H, dim_feedforward=16, dropout=0.0, activation="gelu",
                                       batch_first=True, norm_first=True).eval()
    causal = nn.Transformer.generate_square_subsequent_mask(L)

    def run_d(src):
        return layer(src, src_mask=causal, is_causal=True)

    record(t, "enc_pre", layer, dict(src=torch.randn(N, L, E)), run_d)

    # E: post-norm, relu, sequence first, bool src_key_padding_mask, dropout 0.1 in eval.
    layer = nn.TransformerEncoderLayer(E, H, dim_feedforward=16, dropout=0.1).eval()
    kpm = torch.zeros(N, L, dtype=torch.bool)
    kpm[1, -2:] = True

    def run_e(src, src_key_padding_mask):
        return layer(src, src_key_padding_mask=src_key_padding_mask)

    record(t, "enc_post", layer, dict(src=torch.randn(L, N, E), src_key_padding_mask=kpm), run_e)

    # F: a stack of two pre-norm layers with a final norm, batch first, causal.
    base = nn.TransformerEncoderLayer(E, H, dim_feedforward=16, dropout=0.0, batch_first=True,
                                      norm_first=True)
    enc = nn.TransformerEncoder(base, 2, norm=nn.LayerNorm(E), enable_nested_tensor=False).eval()
    with torch.no_grad():  # the clones start equal; make them differ
        for p in enc.layers[1].parameters():
            p.add_(torch.randn_like(p) * 0.1)

    def run_f(src):
        return enc(src, mask=causal, is_causal=True)

    record(t, "enc_stack", enc, dict(src=torch.randn(N, L, E)), run_f)

    save_file(t, OUT)
    print(f"wrote {len(t)} tensors, {os.path.getsize(OUT)} bytes to {os.path.normpath(OUT)}")


if __name__ == "__main__":
    main()
