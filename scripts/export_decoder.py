#!/usr/bin/env python3
"""Writes tests/fixtures/decoder.safetensors for tests/nn_decoder.rs: PyTorch's
nn.TransformerDecoderLayer (post-norm relu, sequence-first, a float causal target mask and a
bool memory key padding mask; pre-norm gelu, batch-first, bool target key padding and memory
masks) and nn.TransformerDecoder (two post-norm layers, a final norm, batch-first, a causal
target mask), each with its state dict, inputs, output, the input gradients and the parameter
gradients of sum(out * g) for a stored g, and the output in eval without gradients (where
PyTorch's attention may take its fast path). Dropout is 0, so every case is deterministic.
Needs torch and safetensors; the file is checked in, so the test needs neither.

Keys as scripts/export_attention.py's, plus `<case>.out_eval`."""
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(__file__))
from export_attention import record  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "decoder.safetensors")


def with_eval(tensors, case, module, inputs, run):
    record(tensors, case, module, inputs, run)
    module.eval()
    with torch.no_grad():
        tensors[f"{case}.out_eval"] = run(**inputs).contiguous()
    module.train()


def main():
    torch.manual_seed(0)
    t = {}
    E, H, L, S, N, F = 8, 2, 5, 6, 3, 16
    causal = nn.Transformer.generate_square_subsequent_mask(L)

    # A: post-norm relu, sequence-first, float causal tgt_mask, bool memory_key_padding_mask.
    layer = nn.TransformerDecoderLayer(E, H, dim_feedforward=F, dropout=0.0)
    mkpm = torch.zeros(N, S, dtype=torch.bool)
    mkpm[1, -1] = True
    mkpm[2, -3:] = True

    def run_a(tgt, memory, tgt_mask, memory_key_padding_mask):
        return layer(tgt, memory, tgt_mask=tgt_mask,
                     memory_key_padding_mask=memory_key_padding_mask)

    with_eval(t, "dec_a", layer, dict(tgt=torch.randn(L, N, E), memory=torch.randn(S, N, E),
                                      tgt_mask=causal, memory_key_padding_mask=mkpm), run_a)

    # B: pre-norm gelu, batch-first, bool tgt_key_padding_mask and bool memory_mask [L, S].
    layer = nn.TransformerDecoderLayer(E, H, dim_feedforward=F, dropout=0.0, activation="gelu",
                                       batch_first=True, norm_first=True)
    tkpm = torch.zeros(N, L, dtype=torch.bool)
    tkpm[0, -1] = True
    tkpm[2, -2:] = True
    mm = torch.zeros(L, S, dtype=torch.bool)
    for i in range(L):
        for j in range(1, S):
            if (i + 2 * j) % 4 == 0:
                mm[i, j] = True

    def run_b(tgt, memory, tgt_key_padding_mask, memory_mask):
        return layer(tgt, memory, tgt_key_padding_mask=tgt_key_padding_mask,
                     memory_mask=memory_mask)

    with_eval(t, "dec_b", layer, dict(tgt=torch.randn(N, L, E), memory=torch.randn(N, S, E),
                                      tgt_key_padding_mask=tkpm, memory_mask=mm), run_b)

    # C: a decoder of two post-norm layers and a final norm, batch-first, causal tgt_mask.
    layer = nn.TransformerDecoderLayer(E, H, dim_feedforward=F, dropout=0.0, batch_first=True)
    dec = nn.TransformerDecoder(layer, 2, norm=nn.LayerNorm(E))
    with torch.no_grad():
        # The copies are equal after deepcopy: set them apart.
        for p in dec.layers[1].parameters():
            p.add_(0.05 * torch.randn_like(p))

    def run_c(tgt, memory, tgt_mask):
        return dec(tgt, memory, tgt_mask=tgt_mask)

    with_eval(t, "dec_c", dec, dict(tgt=torch.randn(N, L, E), memory=torch.randn(N, S, E),
                                    tgt_mask=causal), run_c)
    save_file(t, OUT)


if __name__ == "__main__":
    main()
