"""pypto's operators under ``torch.autocast("cpu")``. rms_norm and layer_norm of
bfloat16 or float16 x with a float32 weight (and bias), a float32 module's parameters,
as PyTorch's norms take them: the output in x's dtype, computed in float32 and rounded
once (bit for bit PyTorch's); dx in x's dtype, the weight's and bias's gradients in
float32. attention and moe run in the region's dtype, as PyTorch's SDPA and linear."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from test_torch_func import _ROWS  # noqa: E402

import autotune.torch  # noqa: E402, F401  (registers the operators)
from autotune.templates import norm_grad  # noqa: E402
from autotune.torch_call import module  # noqa: E402

ops = torch.ops.pypto
HALF = [torch.bfloat16, torch.float16]

NORMS = {name: _ROWS[name] for name in ("rms_norm", "layer_norm")}  # (pypto's, PyTorch's)


def _inputs(dt, shape=(2, 7, 45)):
    torch.manual_seed(0)
    x = torch.randn(*shape).to(dt)
    w, b = 1 + 0.1 * torch.randn(shape[-1]), 0.1 * torch.randn(shape[-1])
    return x, w, b, torch.randn(*shape).to(dt)


def _grads(f, x, w, b, dy):
    leaves = [t.detach().clone().requires_grad_() for t in (x, w, b)]
    y = f(*leaves)
    y.backward(dy.to(y.dtype))
    return y, [t.grad for t in leaves]


@pytest.mark.parametrize("name", list(NORMS))
@pytest.mark.parametrize("dt", HALF)
def test_a_float32_weight_beside_16_bit_x_as_pytorch(name, dt):
    """The forward bit for bit PyTorch's; the gradients of PyTorch's dtypes, dx within
    one rounding of the float64 gradient, the weight's and bias's summed in float32."""
    x, w, b, dy = _inputs(dt)
    ours, theirs = NORMS[name]
    y, (dx, dw, db) = _grads(ours, x, w, b, dy)
    y_ref, (dx_ref, dw_ref, db_ref) = _grads(theirs, x, w, b, dy)
    assert y.dtype == dt and torch.equal(y, y_ref)
    assert (dx.dtype, dw.dtype) == (dt, torch.float32) == (dx_ref.dtype, dw_ref.dtype)
    _, exact = _grads(theirs, x.double(), w.double(), b.double(), dy.double())
    eps = torch.finfo(dt).eps
    torch.testing.assert_close(dx.double(), exact[0], rtol=eps, atol=2 * eps)
    torch.testing.assert_close(dw.double(), exact[1], rtol=1e-5, atol=1e-5)
    if name == "layer_norm":
        assert db.dtype == torch.float32
        torch.testing.assert_close(db.double(), exact[2], rtol=1e-5, atol=1e-5)


def test_norms_of_a_model_under_autocast_agree_with_pytorch():
    """A float32 block under torch.autocast(cpu, bfloat16): the Linear gives bfloat16,
    the norms take it with their float32 parameters; the output and every parameter's
    gradient as PyTorch's own norms give them."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(32, 32)
    w, b = torch.nn.Parameter(1 + 0.1 * torch.randn(32)), torch.nn.Parameter(torch.randn(32))
    x = torch.randn(5, 32)

    def run(rms, ln):
        for p in (*lin.parameters(), w, b):
            p.grad = None
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = lin(x)
            out = ln(rms(h, w, None), w, b)
        out.float().square().sum().backward()
        return out, [p.grad.clone() for p in (*lin.parameters(), w, b)]

    out, grads = run(NORMS["rms_norm"][0], NORMS["layer_norm"][0])
    out_ref, grads_ref = run(NORMS["rms_norm"][1], NORMS["layer_norm"][1])
    assert out.dtype == torch.bfloat16 and torch.equal(out, out_ref)
    for g, r in zip(grads, grads_ref):
        assert g.dtype == r.dtype == torch.float32
        torch.testing.assert_close(g, r, rtol=0.02, atol=0.05)  # PyTorch's sums in bfloat16


def test_weights_of_other_dtypes_are_refused_by_name():
    x = torch.randn(3, 8).to(torch.bfloat16)
    w32, w16 = torch.ones(8), torch.ones(8, dtype=torch.bfloat16)
    bias = r"layer_norm: bias: dtype torch.bfloat16 differs from weight's \(float32\)"
    with pytest.raises(TypeError, match=bias):
        ops.layer_norm(x, w32, w16, 1e-5)
    with pytest.raises(TypeError, match=r"rms_norm: weight: dtype torch.float64 differs from x's"):
        ops.rms_norm(x, torch.ones(8, dtype=torch.float64), 1e-6)
    wide = r"rms_norm: weight: dtype torch.float32 differs from x's \(float64\)"
    with pytest.raises(TypeError, match=wide):
        ops.rms_norm(x.double(), w32, 1e-6)
    with pytest.raises(
        ValueError, match=r"rmsnorm_fwd: weight_dtype must be None .* got 'float64'"
    ):
        module("rmsnorm_fwd", (4, 8, 1e-6, "bfloat16", "float64"))


@pytest.mark.parametrize("name", list(NORMS))
def test_per_sample_gradients_with_float32_weights(name):
    """vmap(grad) of a bfloat16 norm with float32 weights, shared or one per sample:
    the batching rules keep PyTorch's dtypes, and agree with per-sample calls."""
    import torch.func as func

    x, w, b, dy = _inputs(torch.bfloat16, (4, 3, 16))
    ours, _ = NORMS[name]
    for weights in ((w, b), (w.expand(4, 16).clone(), b)):
        dims = (0, 0 if weights[0].dim() == 2 else None, None, 0)

        def loss(x, w, b, dy):
            return (ours(x, w, b).float() * dy.float()).sum()

        grad = func.grad(loss, argnums=(0, 1, 2))
        got = func.vmap(grad, in_dims=dims)(x, *weights, dy)
        for k in range(4):
            wk = weights[0][k] if weights[0].dim() == 2 else weights[0]
            want = grad(x[k], wk, weights[1], dy[k])
            for g, r in zip(got, want):
                assert g[k].dtype == r.dtype
                torch.testing.assert_close(g[k], r, rtol=0.02, atol=0.02)


TEMPLATES = ["rmsnorm_fwd", "rmsnorm_backward", "layernorm_fwd", "layernorm_backward"]


@pytest.mark.parametrize("tpl", TEMPLATES)
def test_templates_take_a_float32_weight_beside_bfloat16(tpl):
    """The templates themselves, on numpy: bfloat16 x and dy, float32 weight (and bias),
    against the float64 references (the weight's gradients float32)."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rows, cols, eps = 5, 24, 1e-5
    mod = module(tpl, (rows, cols, eps, "bfloat16", "float32"))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, cols)).astype(ml_dtypes.bfloat16)
    w, b = rng.standard_normal(cols).astype("f4"), rng.standard_normal(cols).astype("f4")
    dy = rng.standard_normal((rows, cols)).astype(ml_dtypes.bfloat16)
    args = {
        "rmsnorm_fwd": (x, w),
        "layernorm_fwd": (x, w, b),
        "rmsnorm_backward": (x, w, dy),
        "layernorm_backward": (x, w, dy),
    }[tpl]
    ref = {
        "rmsnorm_fwd": norm_grad.rmsnorm_ref,
        "layernorm_fwd": norm_grad.layernorm_ref,
        "rmsnorm_backward": norm_grad.rmsnorm_grad_ref,
        "layernorm_backward": norm_grad.layernorm_grad_ref,
    }[tpl](*args, eps=eps)
    got = mod(*args)
    got, ref = (t if isinstance(t, tuple) else (t,) for t in (got, ref))
    for g, r in zip(got, ref):
        assert g.dtype == r.dtype
        tol = 1e-5 if g.dtype == np.float32 else 1e-2
        np.testing.assert_allclose(g.astype("f8"), r.astype("f8"), rtol=tol, atol=tol)


def _moe_args():
    torch.manual_seed(0)
    T, d, f, E = 6, 16, 24, 3
    x = torch.randn(T, d)
    wg, wu = torch.randn(E, f, d) / 4, torch.randn(E, f, d) / 4
    wd = torch.randn(E, d, f) / 5
    tw, ti = torch.softmax(torch.randn(T, E), -1).topk(2, -1)
    return x, wg, wu, wd, tw, ti


@pytest.mark.parametrize("dt", HALF)
@pytest.mark.parametrize("name", ["attention", "moe"])
def test_attention_and_moe_run_in_the_autocast_dtype(name, dt):
    """Under torch.autocast(cpu, dt), float32 arguments are cast to dt, as PyTorch's SDPA
    and linear do: the result is the operator's on the cast arguments, bit for bit, and
    the float32 leaves get float32 gradients through the casts; float64 stays float64."""
    torch.manual_seed(0)
    if name == "attention":
        args = [torch.randn(1, 2, 9, 16) for _ in range(3)] + [True]
        op = ops.attention
    else:
        args, op = list(_moe_args()), ops.moe
    floats = [isinstance(a, torch.Tensor) and a.is_floating_point() for a in args]
    leaves = [a.clone().requires_grad_() if f else a for a, f in zip(args, floats)]
    with torch.autocast("cpu", dtype=dt):
        out = op(*leaves)
    cast = [a.to(dt) if f else a for a, f in zip(args, floats)]
    assert out.dtype == dt and torch.equal(out, op(*cast))
    out.float().sum().backward()
    assert leaves[0].grad.dtype == torch.float32 and leaves[0].grad.abs().sum() > 0
    wide = [a.double() if f else a for a, f in zip(args, floats)]
    with torch.autocast("cpu", dtype=dt):
        assert op(*wide).dtype == torch.float64


def test_compiled_attention_under_autocast():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 9, 16) for _ in range(3))
    f = torch.compile(lambda q, k, v: ops.attention(q, k, v, True), fullgraph=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, want = f(q, k, v), F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
