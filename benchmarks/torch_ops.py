"""The PyTorch operators (``torch.ops.pypto.*``) against PyTorch, in the same run.

    python -m benchmarks torch_ops [--threads 1,2] [--only attention,moe] [--repeat 3]
                                   [--logs DIR]

Per thread count a fresh worker process (torch and OpenMP pinned to it) times,
in interleaved blocks of rounds (``common.block_medians``), each operator and its
references on the same tensors:

- attention (B=1, H=8, S=1024, D=64), causal and not, in float32 and bfloat16:
  ``F.scaled_dot_product_attention`` (bfloat16: AMX's tiles on both sides where the
  target has them); and a decoder's step, ``attention decode`` (one query per head,
  B=1, H=32, D=128, 2048 keys: the template's decode form), with 8 key/value heads
  (``gqa``, grouped-query) in float32 and float16; and a prompt of a new length,
  ``attention prefill 1000`` (causal, B=1, H=32 over 8 key/value heads, D=128, 1000
  tokens, after two other lengths: the module of its bucket, 1024, on padded copies);
  and ``attention padding mask``: 8 sequences of ViT-B's 197 tokens (H=12, D=64),
  each with its last keys masked out by a ``[8, 1, 1, 197]`` bool mask;
- moe (8 experts, top-2, 512 tokens, d_model 1024, d_ff 2816, SwiGLU): the eager
  per-expert loop (gather, SwiGLU, scatter-add) and ``torch.compile`` of it, in float32
  and (``moe bfloat16``) in bfloat16, where PyTorch's GEMMs use the BF16 instructions;
- rms_norm, layer_norm, softmax, gelu on 4096 x 4096: the eager composition and
  ``torch.compile`` of it, and GB/s (one read, one write) against the triad peak;
  the norms and softmax on short rows too, 2048 x 768 (a BERT-base batch: 6 MiB, in
  the L3), and layer_norm's forward and backward through autograd there (``train``:
  the gradients of x, weight and bias); and the norms of a decoder's step, 1 x 4096
  with ``nn.Parameter`` weights, where the call's own overhead is most of the time;
- the transformer block of ``examples/transformer_block.py`` (S=256, d=512):
  eager and ``torch.compile`` of it, against the block with the pypto operators.

The operators use the best records for their shapes on this host's target, as
``import autotune.torch`` finds them (the user's, then the shipped ones);
``--logs DIR`` puts the records in DIR first (e.g. what ``pypto-tune all
--log-dir DIR`` wrote on this machine).

A row's ratio is reference time / pypto time (above 1: pypto is faster). Every
pypto output is checked against the first reference before timing.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import peak  # noqa: E402
from benchmarks.common import (  # noqa: E402
    block_medians,  # noqa: E402
    counts,
    run_workers,
    table,
)

ROWS = ("attention", "attention causal", "attention bfloat16", "attention causal bfloat16",
        "attention decode", "attention decode gqa", "attention decode gqa float16",
        "attention prefill 1000", "attention padding mask", "moe",
        "moe bfloat16", "rms_norm", "layer_norm", "softmax", "gelu", "rms_norm 2048x768",
        "layer_norm 2048x768", "softmax 2048x768", "layer_norm 2048x768 train",
        "rms_norm 1x4096", "layer_norm 1x4096", "block")  # fmt: skip
N = 4096  # rows and columns of the memory-bound operators
SHORT = (2048, 768)  # ... and of their short rows
# the rows counted in GB/s (one read of x, one write of y): their elements
MEMORY_BOUND = {**dict.fromkeys(("rms_norm", "layer_norm", "softmax", "gelu"), N * N),
                **dict.fromkeys((f"{r} {SHORT[0]}x{SHORT[1]}" for r in ("rms_norm", "layer_norm",
                                 "softmax")), SHORT[0] * SHORT[1])}  # fmt: skip


def _moe_loop(torch, F):
    def run(x, wg, wu, wd, tw, ti):
        out = torch.zeros_like(x)
        for e in range(wg.shape[0]):
            tok, slot = (ti == e).nonzero(as_tuple=True)
            he = F.silu(x[tok] @ wg[e].T) * (x[tok] @ wu[e].T)
            out.index_add_(0, tok, (he @ wd[e].T) * tw[tok, slot, None])
        return out

    return run


def _cases(torch, only):
    """row -> (pypto fn, {reference name: fn}, inputs)."""
    import torch.nn.functional as F

    ops = torch.ops.pypto
    g = torch.Generator().manual_seed(0)
    cases = {}
    want = lambda row: not only or any(o in row for o in only)  # noqa: E731
    for causal, bf16 in ((False, False), (True, False), (False, True), (True, True)):
        row = "attention" + " causal" * causal + " bfloat16" * bf16
        if want(row):
            q, k, v = (torch.randn(1, 8, 1024, 64, generator=g) for _ in range(3))
            if bf16:
                q, k, v = q.bfloat16(), k.bfloat16(), v.bfloat16()
            cases[row] = (
                lambda q, k, v, c=causal: ops.attention(q, k, v, c, None),
                {"sdpa": lambda q, k, v, c=causal: F.scaled_dot_product_attention(
                    q, k, v, is_causal=c)},
                (q, k, v),
            )  # fmt: skip
    for row, heads, dt in (("attention decode", 32, torch.float32),
                           ("attention decode gqa", 8, torch.float32),
                           ("attention decode gqa float16", 8, torch.float16)):  # fmt: skip
        if want(row):
            q = torch.randn(1, 32, 1, 128, generator=g).to(dt)
            k, v = (torch.randn(1, heads, 2048, 128, generator=g).to(dt) for _ in range(2))
            gqa = heads < 32
            cases[row] = (
                lambda q, k, v, gqa=gqa: ops.attention(q, k, v, False, None, gqa),
                {"sdpa": lambda q, k, v, gqa=gqa: F.scaled_dot_product_attention(
                    q, k, v, enable_gqa=gqa)},
                (q, k, v),
            )  # fmt: skip
    if want("attention prefill"):  # two other lengths first: 1000 takes its bucket's module
        for n in (100, 200, 1000):
            q = torch.randn(1, 32, n, 128, generator=g)
            k, v = (torch.randn(1, 8, n, 128, generator=g) for _ in range(2))
            if n != 1000:
                ops.attention(q, k, v, True, None, True)
        cases["attention prefill 1000"] = (
            lambda q, k, v: ops.attention(q, k, v, True, None, True),
            {"sdpa": lambda q, k, v: F.scaled_dot_product_attention(
                q, k, v, is_causal=True, enable_gqa=True)},
            (q, k, v),
        )  # fmt: skip
    if want("attention padding mask"):
        q, k, v = (torch.randn(8, 12, 197, 64, generator=g) for _ in range(3))
        m = torch.arange(197) < torch.randint(100, 198, (8, 1, 1, 1), generator=g)
        cases["attention padding mask"] = (
            lambda q, k, v, m: ops.attention(q, k, v, False, None, False, m),
            {"sdpa": lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m)},
            (q, k, v, m),
        )  # fmt: skip
    if want("moe"):
        T, d, ff, E = 512, 1024, 2816, 8
        x = torch.randn(T, d, generator=g)
        wg, wu = (torch.randn(E, ff, d, generator=g) * d**-0.5 for _ in range(2))
        wd = torch.randn(E, d, ff, generator=g) * ff**-0.5
        tw, ti = torch.softmax(torch.randn(T, E, generator=g), -1).topk(2, -1)
        loop = _moe_loop(torch, F)
        ins = (x, wg, wu, wd, tw / tw.sum(-1, keepdim=True))
        cases["moe"] = (ops.moe, {"eager loop": loop, "torch.compile": torch.compile(loop)},
                        (*ins, ti))  # fmt: skip
        if want("moe bfloat16"):
            cases["moe bfloat16"] = (
                ops.moe, {"eager loop": loop, "torch.compile": torch.compile(loop)},
                (*(t.bfloat16() for t in ins), ti),
            )  # fmt: skip
    x = torch.randn(N, N, generator=g)
    w, b = 1 + 0.1 * torch.randn(N, generator=g), 0.1 * torch.randn(N, generator=g)
    comps = {
        "rms_norm": (lambda x, w: ops.rms_norm(x, w, 1e-6),
                     lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w,
                     (x, w)),
        "layer_norm": (lambda x, w, b: ops.layer_norm(x, w, b, 1e-5),
                       lambda x, w, b: F.layer_norm(x, (N,), w, b, 1e-5), (x, w, b)),
        "softmax": (lambda x: ops.softmax(x, -1), lambda x: torch.softmax(x, -1), (x,)),
        "gelu": (lambda x: ops.gelu(x, "none"), lambda x: F.gelu(x), (x,)),
    }  # fmt: skip
    for row, (mine, ref, ins) in comps.items():
        if want(row):
            cases[row] = (mine, {"eager": ref, "torch.compile": torch.compile(ref)}, ins)
    R, C = SHORT
    x = torch.randn(R, C, generator=g)
    w, b = 1 + 0.1 * torch.randn(C, generator=g), 0.1 * torch.randn(C, generator=g)
    short = {
        "rms_norm": (lambda x, w: ops.rms_norm(x, w, 1e-6),
                     lambda x, w: F.rms_norm(x, (C,), w, 1e-6), (x, w)),
        "layer_norm": (lambda x, w, b: ops.layer_norm(x, w, b, 1e-5),
                       lambda x, w, b: F.layer_norm(x, (C,), w, b, 1e-5), (x, w, b)),
        "softmax": (lambda x: ops.softmax(x, -1), lambda x: torch.softmax(x, -1), (x,)),
    }  # fmt: skip
    for name, (mine, ref, ins) in short.items():
        row = f"{name} {R}x{C}"
        if want(row):
            cases[row] = (mine, {"eager": ref, "torch.compile": torch.compile(ref)}, ins)
    if want(f"layer_norm {R}x{C} train"):
        mine, ref, ins = short["layer_norm"]
        dy = torch.randn(R, C, generator=g)
        leaves = [t.clone().requires_grad_() for t in ins]
        refs = {"eager": ref, "torch.compile": torch.compile(ref)}
        cases[f"layer_norm {R}x{C} train"] = (
            _trained(torch, mine, dy),
            {n: _trained(torch, f, dy) for n, f in refs.items()},
            leaves,
        )
    wp = torch.nn.Parameter(1 + 0.1 * torch.randn(N, generator=g))
    bp = torch.nn.Parameter(0.1 * torch.randn(N, generator=g))
    x1 = torch.randn(1, N, generator=g)
    step = {  # a decoder's step: one token, a model's parameters; the call's overhead
        "rms_norm": (lambda x, w: ops.rms_norm(x, w, 1e-6),
                     lambda x, w: F.rms_norm(x, (N,), w, 1e-6), (x1, wp)),
        "layer_norm": (lambda x, w, b: ops.layer_norm(x, w, b, 1e-5),
                       lambda x, w, b: F.layer_norm(x, (N,), w, b, 1e-5), (x1, wp, bp)),
    }  # fmt: skip
    for name, (mine, ref, ins) in step.items():
        if want(f"{name} 1x{N}"):
            cases[f"{name} 1x{N}"] = (
                mine,
                {"eager": ref, "torch.compile": torch.compile(ref)},
                ins,
            )
    if want("block"):
        from examples import transformer_block as tb

        p = tb.make_params(512, 8, 1408, 8)
        xb = torch.randn(256, 512, generator=g)
        ref = lambda x: tb.block_torch(x, p)  # noqa: E731
        cases["block"] = (lambda x: tb.block_pypto(x, p),
                          {"eager": ref, "torch.compile": torch.compile(ref)}, (xb,))  # fmt: skip
    return cases


def _trained(torch, f, dy):
    """``f``'s forward and backward through autograd: the gradients of its inputs."""

    def run(*leaves):
        with torch.enable_grad():
            return torch.autograd.grad(f(*leaves), leaves, dy)

    return run


def _records(logs: str) -> list:
    return sorted(glob.glob(os.path.join(logs, "*.jsonl"))) if logs else []


def worker(threads: int, only, logs: str = "") -> dict:
    import torch

    import autotune as at
    import autotune.torch  # noqa: F401  (registers torch.ops.pypto.*)

    torch.set_num_threads(threads)
    out = {}
    with torch.no_grad(), at.apply_history_best(_records(logs)):
        for row, (mine, refs, ins) in _cases(torch, only).items():
            expect, got = next(iter(refs.values()))(*ins), mine(*ins)
            for e, o in zip(*((t,) if torch.is_tensor(t) else t for t in (expect, got))):
                err = (o - e).abs().max().item()
                tol = 2e-2 if e.dtype == torch.bfloat16 else 1e-3  # bfloat16: 2^-8 steps
                if not err <= tol * max(1.0, e.abs().max().item()):
                    raise SystemExit(f"{row}: the pypto operator differs from PyTorch by {err}")
            fns = {"pypto": lambda m=mine, a=ins: m(*a)}
            fns.update({n: (lambda f=f, a=ins: f(*a)) for n, f in refs.items()})
            out[row] = block_medians(fns, rounds=6)
            print(f"  {threads} thread(s) {row}: done", file=sys.stderr)
    return out


def _time(seconds: float) -> str:
    """A call's time: in us below 0.1 ms (a small call's overhead), else in ms."""
    return f"{seconds * 1e6:.1f} us" if seconds < 1e-4 else f"{seconds * 1e3:.2f} ms"


def report(runs: list, triad: dict) -> str:
    lines = []
    for t in runs[0]:
        rows = []
        for row in runs[0][t]:
            med = {k: float(np.median([r[t][row][k] for r in runs])) for k in runs[0][t][row]}
            ratios = [f"{n} {_time(v)} ({v / med['pypto']:.2f}x)"
                      for n, v in med.items() if n != "pypto"]  # fmt: skip
            extra = ""
            if row in MEMORY_BOUND:
                gbps = 2 * 4 * MEMORY_BOUND[row] / med["pypto"] / 1e9
                extra = f"{gbps:.1f} GB/s = {gbps / triad[t]:.0%} of triad"
            rows.append((row, _time(med["pypto"]), "; ".join(ratios), extra))
        lines.append(f"{t} thread(s), triad {triad[t]:.1f} GB/s")
        lines.append(table(("operator", "pypto", "references (ref time / pypto time)", ""),
                           rows))  # fmt: skip
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m benchmarks torch_ops",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--threads", type=counts, default="1,2", help="comma-separated thread counts")
    p.add_argument("--only", default="", help=f"comma-separated substrings of {', '.join(ROWS)}")
    p.add_argument("--repeat", type=int, default=1, help="whole runs; medians are reported")
    p.add_argument("--logs", default="", help="a directory of tuning records used first")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    only = [o for o in a.only.split(",") if o]
    if a.logs and not _records(a.logs):
        p.error(f"--logs {a.logs}: no *.jsonl tuning records there")
    if only and not any(o in r for o in only for r in ROWS):
        p.error(f"--only {a.only!r} matches no row; rows: {', '.join(ROWS)}")
    if a.worker:
        print(json.dumps(worker(int(os.environ["OMP_NUM_THREADS"]), only, a.logs)))
        return
    threads = a.threads
    import pypto as pt

    triad = {t: peak.measure(t)["triad_gbps"] for t in threads}
    script = os.path.abspath(__file__)
    extra = ["--only", a.only, "--logs", a.logs]
    runs = [run_workers(script, threads, extra) for _ in range(max(1, a.repeat))]
    source = a.logs or "the user's and the shipped ones"
    print(f"pypto {pt.__version__} on {pt.Target('host').name}, {os.cpu_count()} cores; "
          f"medians over {len(runs)} run(s); records: {source}")  # fmt: skip
    print(report(runs, triad))


if __name__ == "__main__":
    main()
