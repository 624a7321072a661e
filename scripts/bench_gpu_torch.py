#!/usr/bin/env python3
"""PyTorch's twins of the bench's gpu/ cases (benches/cases/gpu.rs), so wgtensor's figures and
PyTorch CUDA's sit side by side from one run on one GPU (docs/BENCHMARKS.md).

    python3 scripts/bench_gpu_torch.py [--runs 10] [--warmup 3] [--quick] [CASE_OR_PREFIX ...]

Every case runs `--warmup` times, then `--runs` timed runs, each synchronized
(torch.cuda.synchronize before and after); the median is printed in the bench's style:

    case=gpu/gemm_4096 torch_ms=2.710 gflops=50716.2

Shapes and counts are the bench's: GEMMs in f32 with TF32 off (cuBLAS's fp32 path, as the
issues measured) and in f16; convolutions through cuDNN (f32, TF32 off); elementwise ops and
a transposed copy; batch norm training; LSTM / GRU (cuDNN) forward, training (forward +
backward) and short sequences; a synced small op. `--quick` shrinks every shape (a smoke test
of the script itself, on the CPU when there is no CUDA: its figures mean nothing). Without
torch the script says so and exits 0. A case PyTorch cannot run prints `skipped=<reason>`.
"""
import argparse
import statistics
import sys
import time


def parse():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="tiny shapes (smoke test)")
    ap.add_argument("names", nargs="*", help="cases or prefixes (default: all)")
    return ap.parse_args()


def main():
    args = parse()
    try:
        import torch
    except ImportError:
        print("# bench_gpu_torch: torch is not installed; nothing to compare")
        return 0
    cuda = torch.cuda.is_available()
    if not cuda and not args.quick:
        print("# bench_gpu_torch: no CUDA device (run with --quick for a CPU smoke test)")
        return 0
    dev = torch.device("cuda" if cuda else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    q = args.quick
    name = torch.cuda.get_device_name(0) if cuda else "cpu (quick smoke test)"
    print(f"# torch {torch.__version__} on {name}")

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def rand(*shape, dtype=torch.float32, grad=False):
        t = torch.rand(*shape, device=dev, dtype=torch.float32) * 2 - 1
        return t.to(dtype).requires_grad_(grad)

    def s(n):
        """A size, shrunk by --quick."""
        return max(1, n // 16) if q else n

    cases = []

    def case(cname, flops=0.0, nbytes=0.0):
        def wrap(setup):
            cases.append((cname, setup, flops, nbytes))
            return setup

        return wrap

    def gemm(n, dtype):
        a, b = rand(n, n, dtype=dtype), rand(n, n, dtype=dtype)
        return lambda: a @ b

    for n, suffix, dt in [
        (4096, "", torch.float32),
        (8192, "", torch.float32),
        (4096, "_f16", torch.float16),
        (8192, "_f16", torch.float16),
    ]:
        n2 = s(n)
        case(f"gpu/gemm_{n}{suffix}", 2.0 * n2**3)(lambda n2=n2, dt=dt: gemm(n2, dt))

    bb = s(64)
    case("gpu/bgemm_64x512", 2.0 * bb * s(512) ** 3)(
        lambda: (lambda a, b: lambda: torch.bmm(a, b))(
            rand(bb, s(512), s(512)), rand(bb, s(512), s(512))
        )
    )
    case("gpu/gemm_splitk_256x65536", 2.0 * s(256) ** 2 * s(65536))(
        lambda: (lambda a, b: lambda: a @ b)(rand(s(256), s(65536)), rand(s(65536), s(256)))
    )

    F = torch.nn.functional
    cx = [s(32), 128, s(56), s(56)]
    cxg = [s(32), 256, s(56), s(56)]

    def conv_flops(x, groups, o, kk=9):
        n, c, h, w = x
        return 2.0 * n * o * h * w * (c // groups) * kk

    def conv(x, groups, o):
        xt = rand(*x)
        w = rand(o, x[1] // groups, 3, 3)
        b = rand(o)
        return lambda: F.conv2d(xt, w, b, padding=1, groups=groups)

    case("gpu/conv2d", conv_flops(cx, 1, 128))(lambda: conv(cx, 1, 128))

    def wgrad():
        x = rand(*cx)
        dy = rand(cx[0], 128, cx[2], cx[3])
        return lambda: torch.nn.grad.conv2d_weight(x, (128, 128, 3, 3), dy, padding=1)

    case("gpu/conv2d_wgrad", conv_flops(cx, 1, 128))(wgrad)
    case("gpu/conv2d_grouped", conv_flops(cxg, 32, 256))(lambda: conv(cxg, 32, 256))
    case("gpu/conv2d_depthwise", conv_flops(cxg, 256, 256))(lambda: conv(cxg, 256, 256))

    n20, n26 = s(1 << 20), (1 << 16 if q else 1 << 26)
    for n, tag in [(n20, "2e20"), (n26, "2e26")]:
        case(f"gpu/map_{tag}", nbytes=8.0 * n)(lambda n=n: (lambda x: lambda: x * 1.5)(rand(n)))
        case(f"gpu/add_{tag}", nbytes=12.0 * n)(
            lambda n=n: (lambda x, y: lambda: x + y)(rand(n), rand(n))
        )
    case("gpu/sum_2e26", nbytes=4.0 * n26)(lambda: (lambda x: lambda: x.sum())(rand(n26)))
    t4 = s(4096)
    case("gpu/transpose_contig_4096", nbytes=8.0 * t4 * t4)(
        lambda: (lambda x: lambda: x.transpose(0, 1).contiguous())(rand(t4, t4))
    )
    bn = [s(64), 256, s(56), s(56)]
    bn_n = bn[0] * bn[1] * bn[2] * bn[3]
    def churn(steady):
        x = rand(*bn)
        if not steady:
            junk = [torch.zeros(*bn, device=dev) for _ in range(6)]
            sync()
            del junk
        return lambda: x * 1.0

    case("gpu/churn", nbytes=8.0 * bn_n)(lambda: churn(False))
    case("gpu/churn_steady", nbytes=8.0 * bn_n)(lambda: churn(True))

    def bn_train():
        x = rand(*bn)
        m = torch.nn.BatchNorm2d(256).to(dev).train()
        return lambda: m(x)

    case("gpu/batchnorm_train", nbytes=8.0 * bn_n)(bn_train)

    hb, hh = s(64), s(512)

    def rnn_flops(t, gates, b=None, h=None):
        # As benches/cases/rnn.rs: the recurrent and input products of every step.
        b, h = b or hb, h or hh
        return 2.0 * t * b * gates * h * (h + h)

    def rnn(kind, t, train, b=None, h=None):
        b, h = b or hb, h or hh
        cls = torch.nn.LSTM if kind == "lstm" else torch.nn.GRU
        m = cls(h, h).to(dev)
        x = rand(t, b, h, grad=train)

        def fwd():
            with torch.no_grad():
                return m(x)

        def fwd_bwd():
            y, _ = m(x)
            y.sum().backward()

        return fwd_bwd if train else fwd

    for kind, t, train, cname, gates in [
        ("lstm", 100, False, "gpu/lstm_h512_t100", 4),
        ("gru", 100, False, "gpu/gru_h512_t100", 3),
        ("lstm", 100, True, "gpu/lstm_h512_t100_train", 4),
        ("lstm", 1, False, "gpu/lstm_h512_t1", 4),
        ("lstm", 10, False, "gpu/lstm_h512_t10", 4),
    ]:
        mult = 3.0 if train else 1.0
        case(cname, mult * rnn_flops(t, gates))(
            lambda kind=kind, t=t, train=train: rnn(kind, t, train)
        )

    # The hidden sizes around the sequence kernel's limit (T 32), as benches/cases/gpu.rs.
    for b, h, train, cname in [
        (16, 64, False, "gpu/lstm_h64_b16_t32"),
        (64, 96, False, "gpu/lstm_h96_b64_t32"),
        (16, 128, False, "gpu/lstm_h128_b16_t32"),
        (256, 128, False, "gpu/lstm_h128_b256_t32"),
        (16, 128, True, "gpu/lstm_h128_b16_t32_train"),
    ]:
        mult = 3.0 if train else 1.0
        case(cname, mult * rnn_flops(32, 4, s(b), s(h)))(
            lambda b=b, h=h, train=train: rnn("lstm", 32, train, s(b), s(h))
        )

    def sync_op():
        x = rand(n20)

        def run():
            x * 1.5
            sync()

        return run

    case("gpu/sync_op")(sync_op)

    # The split plans (rows too few to fill a GPU) and the general scatter_add.
    vocab = [s(64), s(151936)]
    case("gpu/argmax_vocab", nbytes=4.0 * vocab[0] * vocab[1])(
        lambda: (lambda x: lambda: x.argmax(-1))(rand(*vocab))
    )
    row = s(1 << 24)
    case("gpu/softmax_row_2e24", nbytes=8.0 * row)(
        lambda: (lambda x: lambda: torch.softmax(x, -1))(rand(1, row))
    )
    gn = [1, 512, s(64), s(64)]
    gn_n = gn[1] * gn[2] * gn[3]

    def group_norm():
        x, w, b = rand(*gn), rand(512), rand(512)
        return lambda: F.group_norm(x, 32, w, b, 1e-5)

    case("gpu/group_norm_1img", nbytes=8.0 * gn_n)(group_norm)

    def dw_wgrad():
        x = rand(*cxg)
        dy = rand(*cxg)
        return lambda: torch.nn.grad.conv2d_weight(x, (256, 1, 3, 3), dy, padding=1, groups=256)

    case("gpu/conv2d_depthwise_wgrad", conv_flops(cxg, 256, 256))(dw_wgrad)
    sm, sn, nodes = s(1 << 20), 64, s(1 << 16)

    def scatter():
        i = torch.arange(sm * sn, device=dev, dtype=torch.int64)
        # The bench's ids: the high 16 bits of a multiplicative hash (about 16 per node).
        idx = ((((i * 2654435761) % (1 << 32)) >> 16) % nodes).reshape(sm, sn)
        src, base = rand(sm, sn), torch.zeros(nodes, sn, device=dev)
        return lambda: base.scatter_add(0, idx, src)

    case("gpu/scatter_add_general", nbytes=4.0 * (2 * sm * sn + nodes * sn))(scatter)

    wanted = args.names
    for cname, setup, flops, nbytes in cases:
        if wanted and not any(cname == w or cname.startswith(w) for w in wanted):
            continue
        try:
            run = setup()
            for _ in range(args.warmup):
                run()
            sync()
            times = []
            for _ in range(args.runs):
                sync()
                t0 = time.perf_counter()
                run()
                sync()
                times.append((time.perf_counter() - t0) * 1e3)
            ms = statistics.median(times)
        except Exception as e:  # noqa: BLE001 - report and go on
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            print(f"case={cname} skipped={msg}")
            continue
        line = f"case={cname} torch_ms={ms:.3f}"
        if flops:
            line += f" gflops={flops / ms / 1e6:.1f}"
        if nbytes:
            line += f" gbps={nbytes / ms / 1e6:.1f}"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
