"""PyTorch eager's time for a workload: the baseline of ``pypto-tune network``'s report.

    eager_seconds(Workload("conv2d_nchw", (1, 64, 56, 56, 64, 3, 3, 1, 1)))  # F.conv2d
    eager_seconds(Workload("matmul", (128, 768, 768)), threads=1)            # torch.mm

Each template with a PyTorch equivalent has a rule in ``EAGER`` building random
float32 inputs of the workload's shape and the call that computes the same
thing; the time is the median of ``repeat`` timings of ``number`` calls each,
after a warm-up call, with ``threads`` intra-op threads (restored afterwards).
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F

from .workloads import Workload


def _conv(n, c, h, w, k, r, s, stride=1, padding=0, *_):
    x, wt = torch.randn(n, c, h, w), torch.randn(k, c, r, s)
    return lambda: F.conv2d(x, wt, stride=stride, padding=padding)


def _depthwise(n, c, h, w, r, s, stride=1, padding=0, *_):
    x, wt = torch.randn(n, c, h, w), torch.randn(c, 1, r, s)
    return lambda: F.conv2d(x, wt, stride=stride, padding=padding, groups=c)


def _matmul(m, n, k, *_):
    a, b = torch.randn(m, k), torch.randn(k, n)
    return lambda: torch.mm(a, b)


def _batch_matmul(bs, m, n, k, *_):
    a, b = torch.randn(bs, m, k), torch.randn(bs, k, n)
    return lambda: torch.bmm(a, b)


def _dense_bias_gelu(m, n, k):
    x, w, b = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
    return lambda: F.gelu(F.linear(x, w, b))


def _rows(fn):
    def make(rows, cols, *_):
        x, g, b = torch.randn(rows, cols), torch.randn(cols), torch.randn(cols)
        return lambda: fn(x, g, b)

    return make


def _attention(b, h, s, d, causal=False, *_):
    q, k, v = (torch.randn(b, h, s, d) for _ in range(3))
    return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))


# template -> (*args) -> a call computing the workload in PyTorch eager
EAGER = {
    "conv2d_nchw": _conv,
    "conv2d_nchw_winograd": _conv,
    "depthwise_conv2d_nchw": _depthwise,
    "matmul": _matmul,
    "batch_matmul": _batch_matmul,
    "dense_bias_gelu": _dense_bias_gelu,
    "softmax": _rows(lambda x, g, b: torch.softmax(x, -1)),
    "layernorm": _rows(lambda x, g, b: F.layer_norm(x, x.shape[-1:], g, b)),
    "rmsnorm": _rows(lambda x, g, b: F.rms_norm(x, x.shape[-1:], g)),
    "gelu": _rows(lambda x, g, b: F.gelu(x)),
    "attention": _attention,
}


_WARM_S = 0.05  # calls before timing: at least 3, and this long
_REPEAT_S = 0.02  # each timed repeat at least this long (more calls of a short workload)


def eager_seconds(w: Workload, threads: int = 1, number: int = 5, repeat: int = 5):
    """Median seconds of one PyTorch eager call computing workload ``w`` (float32), over
    ``repeat`` repeats of at least ``number`` calls (more where a call is short), after
    a warm-up; None when no rule of ``EAGER`` covers its template or its dtype is not
    float32."""
    times = eager_timings(w, threads, number, repeat)
    return statistics.median(times) if times else None


def eager_timings(w: Workload, threads: int = 1, number: int = 5, repeat: int = 5):
    """The ``repeat`` timings (seconds per call) whose median ``eager_seconds`` is, or
    None: their spread tells a busy machine."""
    make = EAGER.get(w.template)
    if make is None or w.dtype not in (None, "float32"):
        return None
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.no_grad():
            call = make(*w.args)
            t = time.perf_counter()
            warm = 0
            while warm < 3 or time.perf_counter() - t < _WARM_S:  # pools started, caches warm
                call()
                warm += 1
            once = (time.perf_counter() - t) / warm
            number = max(number, min(int(_REPEAT_S / max(once, 1e-9)), 10_000))
            times = []
            for _ in range(repeat):
                t = time.perf_counter()
                for _ in range(number):
                    call()
                times.append((time.perf_counter() - t) / number)
    finally:
        torch.set_num_threads(before)
    return times
