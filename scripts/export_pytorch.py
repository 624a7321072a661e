#!/usr/bin/env python3
"""Saves a PyTorch model's state dict for wgtensor (docs/PORTING.md): the weights by their
state_dict names, plus an input (`__input__`) and PyTorch's eval-mode output for it
(`__logits__`), in one safetensors file that a Rust test can load to check the port.

    python3 scripts/export_pytorch.py model.py:Net out.safetensors --input 2,3,32,32

`model.py:Net` names a file and a class whose constructor takes no arguments (or pass
--weights to load a trained state dict saved with torch.save). Needs torch and safetensors.
"""
import argparse
import importlib.util

import torch
from safetensors.torch import save_file


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="path/to/file.py:ClassName")
    ap.add_argument("out", help="the safetensors file to write")
    ap.add_argument("--input", default="2,3,32,32", help="input shape, comma separated")
    ap.add_argument("--weights", help="a torch.save'd state dict to load first")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    path, cls = a.model.rsplit(":", 1)
    spec = importlib.util.spec_from_file_location("model", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(a.seed)
    model = getattr(mod, cls)()
    if a.weights:
        model.load_state_dict(torch.load(a.weights, map_location="cpu"))
    model.eval()
    x = torch.randn(*[int(d) for d in a.input.split(",")])
    with torch.no_grad():
        logits = model(x)
    tensors = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    # num_batches_tracked is int64 in PyTorch; wgtensor's loader reads it as a counter.
    tensors["__input__"] = x.contiguous()
    tensors["__logits__"] = logits.contiguous()
    save_file(tensors, a.out)
    print(f"wrote {len(tensors) - 2} tensors, input {tuple(x.shape)}, logits {tuple(logits.shape)} to {a.out}")


if __name__ == "__main__":
    main()
