#!/usr/bin/env python3
"""Times PyTorch's F.scaled_dot_product_attention on the shapes of the bench's gpu/attention_*
cases (benches/cases/attention.rs), once per SDPA backend (flash, efficient, math), so the
figures can sit next to wgtensor's on the same GPU (docs/BENCHMARKS.md).

    python3 scripts/bench_attention_torch.py [--runs 10] [--warmup 3] [CASE_OR_PREFIX ...]

Shapes, as the bench: B 8, H 12, L = S = 1024, E 64 forward and forward + backward in f32 and
f16, a causal f16 forward, and a decode step (L 1, S 2048, f16). Inputs are seeded uniform
values in [-1, 1), [batch, heads, len, dim]. Each case runs `--warmup` times, then `--runs`
timed runs, each synchronized (torch.cuda.synchronize before and after); the median is printed.
The forward runs under torch.no_grad(); forward + backward runs the forward on inputs that
require grad, then out.backward(g) (gradients of q, k and v), with the grads reset between runs.

One line per (case, backend), in the bench's style:

    case=gpu/attention_fwd_f16 backend=flash ms=1.234 gflops=12345.6

gflops uses the bench's count: 4 B H L S E for the forward, 14 B H L S E for forward + backward
(4 + FlashAttention-2's 10 for the backward; recomputation is not counted), halved for causal.
A backend that cannot run a case (flash has no f32 kernel, for example) prints
`case=... backend=... skipped=<reason>`. Without CUDA (or without torch) the script prints a
note and exits 0, so it is safe to run anywhere.
"""
import argparse
import statistics
import sys
import time
import warnings

B, H, E = 8, 12, 64

# (case name as in benches/cases/attention.rs, (B, H, L, S, E), dtype name, backward, causal,
# key/value heads (None: H))
CASES = [
    ("gpu/attention_fwd", (B, H, 1024, 1024, E), "float32", False, False, None),
    ("gpu/attention_fwd_f16", (B, H, 1024, 1024, E), "float16", False, False, None),
    ("gpu/attention_fwd_bwd", (B, H, 1024, 1024, E), "float32", True, False, None),
    ("gpu/attention_fwd_bwd_f16", (B, H, 1024, 1024, E), "float16", True, False, None),
    ("gpu/attention_causal_f16", (B, H, 1024, 1024, E), "float16", False, True, None),
    ("gpu/attention_decode_f16", (B, H, 1, 2048, E), "float16", False, False, None),
    # Llama-3 8B's decode step: 32 query heads over 8 key/value heads, E 128.
    ("gpu/attention_decode_gqa_f16", (B, 32, 1, 4096, 128), "float16", False, False, 8),
]

BACKENDS = ["flash", "efficient", "math"]


def flops(shape, backward, causal):
    b, h, l, s, e = shape
    f = b * h * l * s * e * (14.0 if backward else 4.0)
    return f / 2.0 if causal else f


def selected(name, filters):
    """The bench's rule: a full name, or a family prefix up to the `/` (with or without it)."""
    if not filters:
        return True
    for f in filters:
        if name == f or name.startswith(f.rstrip("/") + "/"):
            return True
    return False


def backend_context(torch, backend):
    """A context manager that allows only `backend`: torch.nn.attention.sdpa_kernel (PyTorch
    2.3+), else the older torch.backends.cuda.sdp_kernel flags."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        which = {
            "flash": SDPBackend.FLASH_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "math": SDPBackend.MATH,
        }[backend]
        return sdpa_kernel([which])
    except ImportError:
        return torch.backends.cuda.sdp_kernel(
            enable_flash=backend == "flash",
            enable_mem_efficient=backend == "efficient",
            enable_math=backend == "math",
        )


def time_case(torch, F, shape, dtype, backward, causal, backend, warmup, runs, kv_heads=None):
    """Median ms of `runs` synchronized runs after `warmup` runs; raises RuntimeError when the
    backend cannot run the case. `kv_heads` below H: grouped-query attention (enable_gqa)."""
    b, h, l, s, e = shape
    hk = kv_heads or h
    gqa = {"enable_gqa": True} if hk != h else {}
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(0)

    def uniform(*sh):
        return (torch.rand(*sh, generator=gen, device=dev, dtype=torch.float32) * 2 - 1).to(dtype)

    q, k, v = uniform(b, h, l, e), uniform(b, hk, s, e), uniform(b, hk, s, e)
    g = uniform(b, h, l, e)
    if backward:
        for t in (q, k, v):
            t.requires_grad_(True)

    def run():
        if backward:
            for t in (q, k, v):
                t.grad = None
            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, **gqa)
            out.backward(g)
        else:
            with torch.no_grad():
                F.scaled_dot_product_attention(q, k, v, is_causal=causal, **gqa)

    with backend_context(torch, backend):
        for _ in range(warmup):
            run()
        torch.cuda.synchronize()
        times = []
        for _ in range(runs):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            run()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def skip_reason(torch, e):
    """A one-word reason, as the bench's `skipped=` values."""
    text = str(e)
    if isinstance(e, torch.cuda.OutOfMemoryError) or "out of memory" in text:
        return "out-of-memory"
    if "No viable backend" in text or "No available kernel" in text:
        return "backend-cannot-run-this-case"
    first = text.strip().splitlines()[0] if text.strip() else type(e).__name__
    return "-".join(first.split())[:60]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10, help="timed runs per case (10)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed runs first (3)")
    ap.add_argument(
        "--backend", action="append", choices=BACKENDS, help="only these backends (repeatable)"
    )
    ap.add_argument("cases", nargs="*", help="case names or family prefixes (default: all)")
    args = ap.parse_args()

    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("# note: torch is not installed; nothing to time (pip install torch on the GPU machine)")
        return 0
    if not torch.cuda.is_available():
        print(
            f"# note: torch {torch.__version__} sees no CUDA device; the attention comparison "
            "needs an NVIDIA GPU, skipped"
        )
        return 0

    print(
        f"# device: {torch.cuda.get_device_name(0)} torch {torch.__version__} "
        f"cuda {torch.version.cuda}"
    )
    dtypes = {"float32": torch.float32, "float16": torch.float16}
    backends = args.backend or BACKENDS
    warnings.simplefilter("ignore")  # "flash attention was not compiled for ..." and the like
    for name, shape, dt, backward, causal, kv_heads in CASES:
        if not selected(name, args.cases):
            continue
        for backend in backends:
            head = f"case={name} backend={backend}"
            try:
                ms = time_case(
                    torch,
                    F,
                    shape,
                    dtypes[dt],
                    backward,
                    causal,
                    backend,
                    args.warmup,
                    args.runs,
                    kv_heads,
                )
            except RuntimeError as e:
                print(f"{head} skipped={skip_reason(torch, e)}", flush=True)
                torch.cuda.empty_cache()
                continue
            gflops = flops(shape, backward, causal) / (ms * 1e-3) / 1e9
            print(f"{head} ms={ms:.3f} gflops={gflops:.1f}", flush=True)
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
