#!/usr/bin/env python3
"""Joins a GPU session's logs into the table docs/BENCHMARKS.md keeps: the bench's `gpu/` lines
(`kernels --bench gpu/`, bench.log) beside PyTorch's twins (scripts/bench_gpu_torch.py and
scripts/bench_attention_torch.py, torch.log / torch_attention.log), one row per case.

    python3 scripts/gpu_compare.py OUT/bench.log OUT/torch.log [OUT/torch_attention.log] [--gpu NAME]

Columns: wgtensor's median ms, PyTorch's (for attention, its fastest SDPA backend), the ratio
wgtensor / PyTorch (above 1: slower), and wgtensor's own gflops / gbps with of_peak / of_copy.
Cases missing on one side print `-`; skipped cases print their reason.
"""
import re
import sys

FIELD = re.compile(r"(\w+)=(\S+)")


def fields(line):
    return dict(FIELD.findall(line))


def read(path):
    rows = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.startswith("case="):
                    continue
                d = fields(line)
                rows.setdefault(d["case"], []).append(d)
    except OSError as e:
        print(f"# gpu_compare: cannot read {path}: {e}", file=sys.stderr)
    return rows


def num(d, key):
    try:
        return float(d[key])
    except (KeyError, ValueError):
        return None


def torch_ms(entries):
    """The fastest of the entries' `torch_ms` / `ms` (attention prints one per backend)."""
    best = None
    for d in entries:
        v = num(d, "torch_ms")
        if v is None:
            v = num(d, "ms")
        if v is not None and (best is None or v < best):
            best = v
    return best


def table(bench, torch):
    out = [
        "| case | wgtensor ms | PyTorch ms | ratio | wgtensor rate | of peak / copy |",
        "|---|---|---|---|---|---|",
    ]
    for case, entries in bench.items():
        d = entries[-1]
        if "skipped" in d:
            out.append(f"| `{case}` | skipped: {d['skipped']} | | | | |")
            continue
        ms = num(d, "ms")
        t = torch_ms(torch.get(case, []))
        ratio = f"{ms / t:.2f}" if ms is not None and t else "-"
        rate = (
            f"{d['gflops']} GFLOPS"
            if "gflops" in d
            else f"{d['gbps']} GB/s"
            if "gbps" in d
            else d.get("us", "") and f"{d['us']} us"
        )
        frac = d.get("of_peak") or d.get("of_copy") or ""
        ms_s = f"{ms:.3f}" if ms is not None else "-"
        t_s = f"{t:.3f}" if t is not None else "-"
        out.append(f"| `{case}` | {ms_s} | {t_s} | {ratio} | {rate} | {frac} |")
    return "\n".join(out)


def main(argv):
    gpu = None
    if "--gpu" in argv:
        i = argv.index("--gpu")
        gpu = argv[i + 1] if i + 1 < len(argv) else None
        argv = argv[:i] + argv[i + 2 :]
    if len(argv) < 2:
        print(__doc__)
        return 2
    bench = read(argv[0])
    torch = {}
    for path in argv[1:]:
        for case, entries in read(path).items():
            torch.setdefault(case, []).extend(entries)
    if gpu:
        print(f"GPU: {gpu}\n")
    print(table(bench, torch))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
