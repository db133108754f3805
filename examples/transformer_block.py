"""A LLaMA-style transformer block (RMSNorm -> attention -> RMSNorm -> top-2 MoE with
SwiGLU experts) in PyTorch, run three ways: eager PyTorch, torch.compile of it, and
with the pypto operators (``torch.ops.pypto.*``). Checks the outputs agree and
prints the time per block.

    python examples/transformer_block.py                    # S=256, d=512, 8 experts
    python examples/transformer_block.py --seq 32 --dim 64 --ff 96 --heads 4 --repeat 1
    python examples/transformer_block.py --dtype bfloat16   # weights and activations

On a machine shared with other work, run it with ``OMP_WAIT_POLICY=passive`` (for
PyTorch and pypto alike): OpenMP's spinning idle threads otherwise take the cores
from whoever runs next, and every implementation's times scatter.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

import autotune.torch  # noqa: F401  (registers torch.ops.pypto.*)

ops = torch.ops.pypto


def make_params(
    dim: int,
    heads: int,
    ff: int,
    experts: int,
    seed: int = 0,
    dtype=torch.float32,
    kv_heads: int | None = None,
) -> dict:
    """The block's weights; ``kv_heads`` (a divisor of ``heads``) key/value heads make
    its attention grouped-query, as LLaMA's larger models."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *s, scale: (torch.randn(*s, generator=g) * scale).to(dtype)  # noqa: E731
    kv = heads if kv_heads is None else kv_heads
    return {
        "heads": heads,
        "kv_heads": kv,
        "n1": 1 + r(dim, scale=0.1),
        "n2": 1 + r(dim, scale=0.1),
        "wqkv": r(dim + 2 * kv * (dim // heads), dim, scale=dim**-0.5),
        "wo": r(dim, dim, scale=dim**-0.5),
        "router": r(experts, dim, scale=dim**-0.5),
        "w_gate": r(experts, ff, dim, scale=dim**-0.5),
        "w_up": r(experts, ff, dim, scale=dim**-0.5),
        "w_down": r(experts, dim, ff, scale=ff**-0.5),
    }


def _rms(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _route(h, p, k=2):
    tw, ti = torch.softmax(h @ p["router"].T, -1).topk(k, -1)
    return tw / tw.sum(-1, keepdim=True), ti


def _heads(qkv: torch.Tensor, p: dict):
    """q ``[H, S, dh]``, k and v ``[Hkv, S, dh]`` from the projected rows."""
    S, H, kv = qkv.shape[0], p["heads"], p["kv_heads"]
    dh = qkv.shape[1] // (H + 2 * kv)
    q, k, v = qkv.split([H * dh, kv * dh, kv * dh], dim=1)
    return (t.reshape(S, -1, dh).transpose(0, 1) for t in (q, k, v))


def block_torch(x: torch.Tensor, p: dict) -> torch.Tensor:
    """Plain PyTorch: the MoE as a loop over experts (gather, SwiGLU, scatter-add)."""
    S, d = x.shape
    q, k, v = _heads(_rms(x, p["n1"]) @ p["wqkv"].T, p)
    gqa = p["kv_heads"] != p["heads"]
    a = F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True, enable_gqa=gqa)
    a = a[0]
    x = x + a.transpose(0, 1).reshape(S, d) @ p["wo"].T
    h = _rms(x, p["n2"])
    tw, ti = _route(h, p)
    out = torch.zeros_like(h)
    for e in range(p["w_gate"].shape[0]):
        tok, slot = (ti == e).nonzero(as_tuple=True)
        he = F.silu(h[tok] @ p["w_gate"][e].T) * (h[tok] @ p["w_up"][e].T)
        out.index_add_(0, tok, (he @ p["w_down"][e].T) * tw[tok, slot, None])
    return x + out


def block_pypto(x: torch.Tensor, p: dict) -> torch.Tensor:
    """The same block with the pypto operators for norms, attention and the MoE."""
    S, d = x.shape
    q, k, v = _heads(ops.rms_norm(x, p["n1"], 1e-6) @ p["wqkv"].T, p)
    gqa = p["kv_heads"] != p["heads"]
    a = ops.attention(q[None], k[None], v[None], True, None, gqa)[0]
    x = x + a.transpose(0, 1).reshape(S, d) @ p["wo"].T
    h = ops.rms_norm(x, p["n2"], 1e-6)
    tw, ti = _route(h, p)
    return x + ops.moe(h, p["w_gate"], p["w_up"], p["w_down"], tw, ti)


def _time(fn, x, repeat: int) -> float:
    fn(x)  # warm-up (compiles, builds modules)
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(x)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument(
        "--kv-heads", type=int, default=None,
        help="key/value heads, a divisor of --heads: grouped-query attention (default: as many)",
    )  # fmt: skip
    ap.add_argument("--ff", type=int, default=1408)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument(
        "--dtype", choices=("float32", "bfloat16"), default="float32",
        help="weights and activations (bfloat16: routing ties may round differently)",
    )  # fmt: skip
    a = ap.parse_args(argv)
    for name in ("seq", "dim", "heads", "ff", "experts", "repeat"):
        if getattr(a, name) < 1:
            ap.error(f"--{name} must be positive, got {getattr(a, name)}")
    if a.dim % a.heads:
        ap.error(f"--dim {a.dim} must be a multiple of --heads {a.heads}")
    if a.kv_heads is not None and not (0 < a.kv_heads <= a.heads and a.heads % a.kv_heads == 0):
        ap.error(f"--kv-heads {a.kv_heads} must divide --heads {a.heads}")
    if a.experts < 2:
        ap.error(f"--experts must be at least 2 (each token goes to its top 2), got {a.experts}")
    dt = getattr(torch, a.dtype)
    p = make_params(a.dim, a.heads, a.ff, a.experts, dtype=dt, kv_heads=a.kv_heads)
    x = torch.randn(a.seq, a.dim, generator=torch.Generator().manual_seed(1)).to(dt)
    runs = {"eager": lambda t: block_torch(t, p)}
    if not a.no_compile:
        runs["torch.compile"] = torch.compile(lambda t: block_torch(t, p))
    runs["pypto ops"] = lambda t: block_pypto(t, p)
    with torch.no_grad():
        ref = block_torch(x, p)
        result = {}
        print(
            f"block: S={a.seq} d={a.dim} heads={a.heads} (key/value: {p['kv_heads']}) "
            f"d_ff={a.ff} experts={a.experts} "
            f"top-2, {a.dtype}"
        )
        print(f"{'implementation':<16}{'ms/block':>10}{'max |diff|':>14}")
        for name, fn in runs.items():
            err = (fn(x) - ref).abs().max().item()
            ms = _time(fn, x, a.repeat) * 1e3
            result[name] = (ms, err)
            print(f"{name:<16}{ms:>10.2f}{err:>14.2e}")
    return result


if __name__ == "__main__":
    main()
