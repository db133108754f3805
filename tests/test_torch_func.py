"""Derivatives under ``torch.func``: grad, vjp, jacrev and vmap(grad) (reverse mode),
jvp, jacfwd and forward_ad (forward mode) through pypto's operators agree with
PyTorch's own compositions (float64), and so do second derivatives (the row
operators' through their backward kernels' definitions); reverse mode over a tangent
is refused by name; ``pypto.torch.register_autograd`` gives a user's operator the
same."""

import re

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional
func = torch.func

import autotune.torch  # noqa: E402, F401  (registers the operators)
import pypto as pt  # noqa: E402
import pypto.torch as ptt  # noqa: E402
import pypto.torch_plan as torch_plan  # noqa: E402

ops = torch.ops.pypto
f64 = torch.float64


def _rand(*shape):
    return torch.randn(*shape, dtype=f64)


def _attention_ref(q, k, v, is_causal=False):
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if is_causal:
        keep = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    return torch.softmax(scores, -1) @ v


def _layer_norm_ref(x, w, b, eps=1e-5):
    """F.layer_norm as its composition: F.layer_norm's own nested forward-mode
    derivative (jvp of a jvp) is wrong (PyTorch issue #196700; finite differences
    agree with this composition)."""
    mu = x.mean(-1, keepdim=True)
    return (x - mu) * torch.rsqrt(((x - mu) ** 2).mean(-1, keepdim=True) + eps) * w + b


def _moe_ref(x, wg, wu, wd, tw, ti):
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for j in range(ti.shape[1]):
            e = ti[t, j]
            out[t] += tw[t, j] * ((F.silu(wg[e] @ x[t]) * (wu[e] @ x[t])) @ wd[e].T)
    return out


def _cases():
    """name: (pypto's f, PyTorch's f, inputs): f of every input, each differentiated."""
    torch.manual_seed(0)
    x, w, b = _rand(3, 19), _rand(19), _rand(19)
    q, k, v = _rand(1, 2, 5, 8), _rand(1, 2, 6, 8), _rand(1, 2, 6, 3)
    E, d, f = 3, 6, 5
    moe = (_rand(4, d), _rand(E, f, d), _rand(E, f, d), _rand(E, d, f), _rand(4, 2))
    ti = torch.tensor([[0, 1], [2, 2], [1, 0], [0, 2]])
    return {
        "gelu": (ops.gelu, F.gelu, (x,)),
        "gelu_tanh": (
            lambda x: ops.gelu(x, "tanh"),
            lambda x: F.gelu(x, approximate="tanh"),
            (x,),
        ),
        "rms_norm": (
            lambda x, w: ops.rms_norm(x, w, 1e-6),
            lambda x, w: F.rms_norm(x, (19,), w, 1e-6),
            (x, w),
        ),
        "layer_norm": (
            lambda x, w, b: ops.layer_norm(x, w, b, 1e-5),
            _layer_norm_ref,
            (x, w, b),
        ),
        "softmax_dim0": (lambda x: ops.softmax(x, 0), lambda x: torch.softmax(x, 0), (x,)),
        "attention": (ops.attention, _attention_ref, (q, k, v)),
        "attention_causal": (
            lambda q, k, v: ops.attention(q, k, v, True),
            lambda q, k, v: _attention_ref(q, k, v, True),
            (q, k, v),
        ),
        "moe": (lambda *t: ops.moe(*t, ti), lambda *t: _moe_ref(*t, ti), moe),
    }


CASES = list(_cases())


def _close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("name", CASES)
def test_grad_and_vjp_agree_with_pytorch(name):
    """torch.func.grad of a weighted sum, for every input at once, and torch.func.vjp
    with a random cotangent: PyTorch's own setup_context error before."""
    ours, theirs, inputs = _cases()[name]
    weights = torch.randn_like(theirs(*inputs))
    argnums = tuple(range(len(inputs)))
    for a, b in zip(
        func.grad(lambda *t: (ours(*t) * weights).sum(), argnums)(*inputs),
        func.grad(lambda *t: (theirs(*t) * weights).sum(), argnums)(*inputs),
    ):
        _close(a, b)
    (y, pull), (y_ref, pull_ref) = func.vjp(ours, *inputs), func.vjp(theirs, *inputs)
    _close(y, y_ref)
    for a, b in zip(pull(weights), pull_ref(weights)):
        _close(a, b)


@pytest.mark.parametrize("name", ["gelu", "rms_norm", "softmax_dim0", "attention"])
def test_jacrev_and_per_sample_gradients_agree_with_pytorch(name):
    """jacrev (a vmap over the backward) and vmap(grad(...)) over a batch of inputs,
    the per-sample gradients of training: the batching rules of gelu's and softmax's
    backward, PyTorch's fallback for the rest."""
    ours, theirs, inputs = _cases()[name]
    first = inputs[0][:1]  # the first row, or the first batch of sequences
    rest = inputs[1:]
    _close(
        func.jacrev(lambda t: ours(t, *rest))(first),
        func.jacrev(lambda t: theirs(t, *rest))(first),
    )

    def per_sample(f):
        return func.vmap(func.grad(lambda t: (f(t.unsqueeze(0), *rest) ** 2).sum()))(inputs[0])

    _close(per_sample(ours), per_sample(theirs))


_ROWS = {  # name: (pypto's, PyTorch's), both of (x, w, b)
    "gelu": (lambda x, w, b: ops.gelu(x), lambda x, w, b: F.gelu(x)),
    "softmax": (lambda x, w, b: ops.softmax(x, -1), lambda x, w, b: torch.softmax(x, -1)),
    "rms_norm": (
        lambda x, w, b: ops.rms_norm(x, w, 1e-6),
        lambda x, w, b: F.rms_norm(x, x.shape[-1:], w, 1e-6),
    ),
    "layer_norm": (
        lambda x, w, b: ops.layer_norm(x, w, b, 1e-5),
        lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b, 1e-5),
    ),
}


@pytest.mark.parametrize("name", list(_ROWS))
@pytest.mark.parametrize("batched_weights", [False, True])
def test_per_sample_gradients_batch_without_the_fallback(name, batched_weights):
    """With PyTorch's per-element fallback off, vmap(grad) over samples of 2 rows each,
    the gradients of x, the weight and the bias, runs on the backward operators'
    batching rules (the norms' weight gradients summed per sample) and agrees with
    PyTorch's; the weights shared, or one per sample."""
    torch.manual_seed(1)
    x, dy = _rand(5, 2, 9), _rand(5, 2, 9)
    w, b = _rand(5, 9) if batched_weights else _rand(9), _rand(9)
    ours, theirs = _ROWS[name]
    dims = (0, 0 if batched_weights else None, None, 0)

    def per_sample(f):
        loss = lambda x, w, b, dy: (f(x, w, b) * dy).sum()  # noqa: E731
        return func.vmap(func.grad(loss, argnums=(0, 1, 2)), in_dims=dims)(x, w, b, dy)

    want = per_sample(theirs)
    fallback = torch._C._functorch._set_vmap_fallback_enabled
    fallback(False)
    try:
        got = per_sample(ours)
    finally:
        fallback(True)
    for a, r in zip(got, want):
        _close(a, r)


@pytest.mark.parametrize("batched_weights", [False, True])
def test_per_sample_weight_gradients_are_summed_by_the_kernel(monkeypatch, batched_weights):
    """vmap(grad) of the norms: the weight's and bias's gradients per sample come from
    the backward kernel's own per-group column sums (groups = the batch), one call for
    shared weights (two for batched ones: dx from dy scaled by each sample's weight);
    vmap of vmap sums per sample of the inner batch too. As PyTorch's."""
    import autotune.torch as at_torch

    ran = []
    call = at_torch.call

    def spy(name, args, *rest, **kw):
        ran.append((name, args))
        return call(name, args, *rest, **kw)

    monkeypatch.setattr(at_torch, "call", spy)
    monkeypatch.setattr(torch_plan, "plan_key", lambda args: None)  # every call to the spy
    torch.manual_seed(4)
    x, dy = _rand(6, 3, 2, 9), _rand(6, 3, 2, 9)
    w, b = (_rand(6, 3, 9) if batched_weights else _rand(9)), _rand(9)
    dims = (0, 0 if batched_weights else None, None, 0)
    for name in ("rms_norm", "layer_norm"):
        ours, theirs = _ROWS[name]

        def per_sample(f, inner):
            loss = lambda x, w, b, dy: (f(x, w, b) * dy).sum()  # noqa: E731
            g = func.grad(loss, argnums=(0, 1, 2))
            args = [t if inner or d is None else t[:, 0] for t, d in zip((x, w, b, dy), dims)]
            return func.vmap(func.vmap(g, in_dims=dims) if inner else g, in_dims=dims)(*args)

        for inner in (False, True):
            ran.clear()
            got = per_sample(ours, inner)
            for a, r in zip(got, per_sample(theirs, inner)):
                _close(a, r)
            calls = [args for n, args in ran if n.endswith("norm_backward")]
            assert len(calls) == 1 + batched_weights, ran
            assert calls[-1][-1] == (18 if inner else 6)  # groups: one per sample


def test_the_backward_operators_sum_per_group():
    """rms_norm_backward and layer_norm_backward take groups: the weight's (and bias's)
    gradient per group of consecutive rows of x; groups that do not divide the rows are
    refused, naming the operator."""
    torch.manual_seed(5)
    x, dy, w = _rand(2, 6, 11), _rand(2, 6, 11), _rand(11)

    def rms(t, v):
        return F.rms_norm(t, (11,), v, 1e-5)

    def layer(t, v):
        return F.layer_norm(t, (11,), v, w, 1e-5)

    for op, norm in ((ops.rms_norm_backward, rms), (ops.layer_norm_backward, layer)):
        ref = lambda x, dy, norm=norm: func.vjp(norm, x, w)[1](dy)  # noqa: E731
        got = op(x, w, dy, 1e-5, 4)
        _close(got[0], ref(x, dy)[0])
        assert got[1].shape == (4, 11)
        for g in range(4):  # rows 3g .. 3g + 2 of the 12
            rows = slice(3 * g, 3 * g + 3)
            xs, dys = x.reshape(12, 11)[rows], dy.reshape(12, 11)[rows]
            _close(got[1][g], ref(xs, dys)[1])
        if len(got) == 3:
            _close(got[2], dy.reshape(4, 3, 11).sum(1))
        with pytest.raises(ValueError, match=r"norm_backward: groups=5 does not divide the 12"):
            op(x, w, dy, 1e-5, 5)
        empty = _rand(0, 2, 6, 11)  # a batch of none: sums of nothing, groups checked
        got = func.vmap(lambda t, d, op=op: op(t, w, d, 1e-5, 2))(empty, empty)
        assert [tuple(g.shape) for g in got] == [(0, 2, 6, 11)] + [(0, 2, 11)] * (len(got) - 1)
        with pytest.raises(ValueError, match=r"norm_backward: groups=5 does not divide the 12"):
            func.vmap(lambda t, d, op=op: op(t, w, d, 1e-5, 5))(empty, empty)


@pytest.mark.parametrize("name", CASES)
def test_second_derivatives_agree_with_pytorch(name):
    """grad of grad, and double backward (create_graph=True), for every input: the row
    operators' backward kernels are differentiated by PyTorch through their
    definitions (they were refused), attention's and moe's backward recomputes the
    definition with PyTorch on the saved inputs."""
    ours, theirs, inputs = _cases()[name]

    def gradgrad(f):
        inner = func.grad(lambda *t: (f(*t) ** 2).sum(), argnums=0)
        return func.grad(lambda *t: inner(*t).sum(), argnums=tuple(range(len(inputs))))(*inputs)

    want = gradgrad(theirs)
    for a, b in zip(gradgrad(ours), want):
        _close(a, b)
    leaf = [t.clone().requires_grad_() for t in inputs]
    (g,) = torch.autograd.grad((ours(*leaf) ** 2).sum(), leaf[0], create_graph=True)
    g.sum().backward()
    for t, b in zip(leaf, want):
        _close(t.grad, b)


def test_first_derivatives_stay_pypto_kernels(monkeypatch):
    """A second derivative is PyTorch's composition; the first, under torch.func.grad,
    vmap(grad) and create_graph=True too, is still the backward template's kernel."""
    import autotune.torch as at_torch

    ran = []
    call = at_torch.call
    monkeypatch.setattr(
        at_torch, "call", lambda name, *a, **k: ran.append(name) or call(name, *a, **k)
    )
    monkeypatch.setattr(torch_plan, "plan_key", lambda args: None)  # every call to the spy
    x, w = _rand(3, 19), _rand(19)

    def loss(t):
        return ops.layer_norm(t, w, w, 1e-5).square().sum()

    for first in (func.grad(loss), func.vmap(func.grad(loss))):
        ran.clear()
        first(x)
        assert ran == ["layernorm_fwd", "layernorm_backward"]
    ran.clear()
    leaf = x.clone().requires_grad_()
    (g,) = torch.autograd.grad(loss(leaf), leaf, create_graph=True)
    assert ran == ["layernorm_fwd", "layernorm_backward"]
    ran.clear()
    g.square().sum().backward()  # the kernel's own derivative is PyTorch's; y's is pypto's
    assert ran == ["layernorm_backward"]
    _close(leaf.grad, func.grad(lambda t: func.grad(
        lambda u: _layer_norm_ref(u, w, w).square().sum())(t).square().sum())(x))  # fmt: skip


@pytest.mark.parametrize("name", ["gelu", "rms_norm", "layer_norm"])
def test_a_gradient_penalty_in_bfloat16(name):
    """A second derivative through 16-bit operators (bfloat16 x, float32 weights as
    under autocast), computed in float32 and rounded once: within bfloat16's precision
    of PyTorch's float32 composition."""
    torch.manual_seed(3)
    x, w, b = torch.randn(4, 32), torch.randn(32), torch.randn(32)
    ours = {
        "gelu": lambda t: ops.gelu(t),
        "rms_norm": lambda t: ops.rms_norm(t, w, 1e-6),
        "layer_norm": lambda t: ops.layer_norm(t, w, b, 1e-5),
    }[name]
    theirs = {
        "gelu": F.gelu,
        "rms_norm": lambda t: F.rms_norm(t, (32,), w, 1e-6),
        "layer_norm": lambda t: _layer_norm_ref(t, w, b),
    }[name]

    def penalty(f, t):
        leaf = t.clone().requires_grad_()
        (g,) = torch.autograd.grad(f(leaf).float().square().sum(), leaf, create_graph=True)
        g.float().square().sum().backward()
        return leaf.grad

    got = penalty(ours, x.bfloat16())
    assert got.dtype == torch.bfloat16
    want = penalty(theirs, x.bfloat16().float())
    torch.testing.assert_close(got.float(), want, rtol=0.05, atol=0.05 * float(want.abs().max()))


def test_compiled_function_of_torch_func_grad():
    """torch.compile(fullgraph=True) of torch.func.grad through an operator, and of a
    grad of that grad."""
    x, w = _rand(3, 19), _rand(19)
    f = func.grad(lambda x: (ops.rms_norm(x, w, 1e-6) ** 2).sum())
    want = func.grad(lambda x: (F.rms_norm(x, (19,), w, 1e-6) ** 2).sum())
    _close(torch.compile(f, fullgraph=True)(x), want(x))
    ff = func.grad(lambda x: f(x).square().sum())
    _close(torch.compile(ff, fullgraph=True)(x), func.grad(lambda x: want(x).square().sum())(x))


def _cube(shape):
    X = pt.placeholder(shape, "float64", name="X")
    Y = pt.compute(shape, lambda i: X[i] * X[i] * X[i], name="Y")
    return pt.create_schedule(Y.op), [X, Y]


def test_register_autograd_gives_a_users_operator_its_derivative_under_torch_func():
    """pypto.torch.register_autograd on a custom_op: .backward() and torch.func.grad
    both use the user's backward; without a backward, differentiating is refused."""
    cube = ptt.custom_op("pypto_test::func_cube", _cube, n_inputs=1)
    triple = ptt.custom_op("pypto_test::func_triple_sq", _cube, n_inputs=1)

    def setup(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    def backward(ctx, dy):
        (x,) = ctx.saved_tensors
        return triple(x) / x * 3 * dy  # 3 x^2 dy, through another pypto kernel

    ptt.register_autograd(cube, backward, setup_context=setup)
    ptt.register_autograd(triple)
    x = _rand(11).abs() + 0.5
    _close(func.grad(lambda t: cube(t).sum())(x), 3 * x**2)
    leaf = x.clone().requires_grad_()
    cube(leaf).sum().backward()
    _close(leaf.grad, 3 * x**2)
    with pytest.raises(NotImplementedError, match=r"pypto_test::func_triple_sq has no deriv"):
        func.grad(lambda t: func.grad(lambda u: cube(u).sum())(t).sum())(x)
    with pytest.raises(TypeError, match=r"is not a custom operator"):
        ptt.register_autograd(torch.ops.aten.sin, backward, setup_context=setup)


def test_a_plain_call_runs_the_operator_as_the_dispatcher_would():
    """A call that nothing differentiates runs the operator's implementation straight
    from its autograd kernel; a kernel registered for the CPU later is the one that runs,
    as through the dispatcher."""
    cube = ptt.custom_op("pypto_test::func_cube_direct", _cube, n_inputs=1)
    ptt.register_autograd(cube)
    x = _rand(7)
    _close(cube(x), x**3)
    with torch.no_grad():
        _close(cube(x), x**3)
    cube.register_kernel("cpu")(lambda t: -t)
    _close(cube(x), -x)


def _no_fallback(f, *args):
    """``f(*args)`` with PyTorch's per-element vmap fallback off: a missing rule raises."""
    fallback = torch._C._functorch._set_vmap_fallback_enabled
    fallback(False)
    try:
        return f(*args)
    finally:
        fallback(True)


def test_vmap_of_attention_folds_the_batch_into_one_call():
    """q, k, v batched or shared, causal, a batched bool mask, a shared float mask of
    the operator's batch or of none: as vmap of PyTorch's SDPA, without the fallback."""
    torch.manual_seed(0)
    q, k, v = _rand(3, 2, 2, 5, 8), _rand(3, 2, 2, 6, 8), _rand(3, 2, 2, 6, 4)
    sdpa = F.scaled_dot_product_attention
    keep = torch.rand(3, 5, 6) > 0.3
    keep[..., 0] = True
    bias = _rand(2, 2, 5, 6)
    cases = [
        (lambda q, k, v: ops.attention(q, k, v), lambda q, k, v: sdpa(q, k, v), (0, 0, 0)),
        (
            lambda q, k, v: ops.attention(q, k, v, True),
            lambda q, k, v: sdpa(q, k, v, is_causal=True),
            (0, None, None),
        ),
        (
            lambda q, k, v, m: ops.attention(q, k, v, attn_mask=m),
            lambda q, k, v, m: sdpa(q, k, v, attn_mask=m),
            (0, None, None, 0),
        ),
        (
            lambda q, k, v: ops.attention(q, k, v, attn_mask=bias),
            lambda q, k, v: sdpa(q, k, v, attn_mask=bias),
            (0, None, None),
        ),
        (
            lambda q, k, v: ops.attention(q, k, v, attn_mask=bias[0, 0]),
            lambda q, k, v: sdpa(q, k, v, attn_mask=bias[0, 0]),
            (None, 0, 0),
        ),
    ]
    for ours, theirs, dims in cases:
        args = [q if dims[0] == 0 else q[0], k if dims[1] == 0 else k[0]]
        args += [v if dims[2] == 0 else v[0]] + ([keep] if len(dims) == 4 else [])
        got = _no_fallback(func.vmap(ours, in_dims=dims), *args)
        _close(got, func.vmap(theirs, in_dims=dims)(*args))
    with pytest.raises(ValueError, match=r"attention: q must be \[B, H, S, D\]"):
        _no_fallback(func.vmap(lambda t: ops.attention(t, t, t)), _rand(2, 3, 4))


def test_vmap_of_moe_puts_every_elements_tokens_in_one_call():
    """Token sets batched over shared experts: one call on all the tokens; experts
    batched too: one call per element. Both as per-element calls."""
    torch.manual_seed(0)
    x, wg, wu, wd, tw = _cases()["moe"][2]
    ti = torch.tensor([[0, 1], [2, 2], [1, 0], [0, 2]])
    xs, tws = torch.stack([x, 2 * x, -x]), torch.stack([tw, tw.flip(0), tw * 0.5])
    tis = torch.stack([ti, ti.flip(0), ti])
    dims = (0, None, None, None, 0, 0)
    got = _no_fallback(func.vmap(ops.moe, in_dims=dims), xs, wg, wu, wd, tws, tis)
    for i in range(3):
        _close(got[i], ops.moe(xs[i], wg, wu, wd, tws[i], tis[i]))
    wgs = torch.stack([wg, wg * 2])
    dims = (None, 0, None, None, None, None)
    got = _no_fallback(func.vmap(ops.moe, in_dims=dims), x, wgs, wu, wd, tw, ti)
    for i in range(2):
        _close(got[i], ops.moe(x, wgs[i], wu, wd, tw, ti))


# ---------------------------------------------------------------- forward mode


@pytest.mark.parametrize("name", CASES)
def test_forward_mode_agrees_with_pytorch(name):
    """torch.func.jvp along random tangents of every input, jacfwd of the first, and
    forward_ad's dual tensors: as PyTorch's compositions."""
    import torch.autograd.forward_ad as fwAD

    ours, theirs, inputs = _cases()[name]
    tangents = tuple(torch.randn_like(a) for a in inputs)
    (y, t), (y_ref, t_ref) = func.jvp(ours, inputs, tangents), func.jvp(theirs, inputs, tangents)
    _close(y, y_ref)
    _close(t, t_ref)
    _close(
        func.jacfwd(lambda a: ours(a, *inputs[1:]))(inputs[0]),
        func.jacfwd(lambda a: theirs(a, *inputs[1:]))(inputs[0]),
    )
    with fwAD.dual_level():
        dual = fwAD.make_dual(inputs[0], tangents[0])
        got = fwAD.unpack_dual(ours(dual, *inputs[1:])).tangent
    _close(got, func.jvp(lambda a: theirs(a, *inputs[1:]), inputs[:1], tangents[:1])[1])


_NESTED = {
    "jvp(grad)": lambda f, a: func.jvp(func.grad(lambda y: f(y).square().sum()), (a,), (a,))[1],
    "grad(jvp)": lambda f, a: func.grad(lambda y: func.jvp(f, (y,), (a,))[1].square().sum())(a),
    "jvp(jvp)": lambda f, a: func.jvp(lambda y: func.jvp(f, (y,), (a,))[1], (a,), (a,))[1],
    "hessian": lambda f, a: func.hessian(lambda y: f(y).square().sum())(a),
    "jacrev(jacrev)": lambda f, a: func.jacrev(func.jacrev(lambda y: f(y).square().sum()))(a),
    "vmap(jvp)": lambda f, a: func.vmap(lambda y: func.jvp(f, (y,), (y,))[1])(
        torch.stack([a, 2 * a])
    ),
}


@pytest.mark.parametrize("nest", list(_NESTED))
@pytest.mark.parametrize(
    "name", ["gelu", "rms_norm", "layer_norm", "softmax_dim0", "attention", "moe"]
)
def test_nested_derivatives_are_right_or_refused_by_name(name, nest):
    """Every nesting of forward and reverse mode through an operator agrees with
    PyTorch's composition, but reverse mode over a tangent (PyTorch keeps no graph of a
    custom operator's tangent), which raises NotImplementedError naming the operator."""
    ours, theirs, inputs = _cases()[name]
    a = inputs[0]
    with_rest = [lambda y, f=f: f(y, *inputs[1:]) for f in (ours, theirs)]
    want = _NESTED[nest](with_rest[1], a)
    try:
        got = _NESTED[nest](with_rest[0], a)
    except NotImplementedError as e:
        assert re.search(r"pypto::\w+: a reverse-mode derivative of its forward", str(e))
        assert nest == "grad(jvp)", str(e)
        return
    _close(got, want)


def test_a_users_operator_takes_a_jvp_rule():
    cube = ptt.custom_op("pypto_test::func_cube_fwd", _cube, n_inputs=1)
    ptt.register_autograd(
        cube,
        lambda ctx, dy: 3 * ctx.x**2 * dy,
        setup_context=lambda ctx, inputs, output: setattr(ctx, "x", inputs[0]),
        jvp=lambda inputs, out, t: 3 * inputs[0] ** 2 * t,
    )
    x, t = _rand(11), _rand(11)
    _close(func.jvp(cube, (x,), (t,))[1], 3 * x**2 * t)
    _close(func.jacfwd(cube)(x), torch.diag(3 * x**2))


def test_a_users_operator_takes_a_definition_for_forward_mode():
    """register_autograd(..., definition=f): under forward mode the operator is f,
    which PyTorch differentiates (jvp, jacfwd, and jvp of a jvp); a jvp rule beside it
    is refused."""
    cube = ptt.custom_op("pypto_test::func_cube_def", _cube, n_inputs=1)
    ptt.register_autograd(cube, definition=lambda t: t * t * t)
    x, t = _rand(11), _rand(11)
    _close(cube(x), x**3)
    _close(func.jvp(cube, (x,), (t,))[1], 3 * x**2 * t)
    _close(func.jacfwd(cube)(x), torch.diag(3 * x**2))
    _close(func.jvp(lambda y: func.jvp(cube, (y,), (t,))[1], (x,), (t,))[1], 6 * x * t * t)
    other = ptt.custom_op("pypto_test::func_cube_both", _cube, n_inputs=1)
    with pytest.raises(TypeError, match="func_cube_both: a jvp rule or a definition, not both"):
        ptt.register_autograd(other, jvp=lambda inputs, out, t: t, definition=lambda t: t)


def test_a_float_attention_mask_gets_its_gradient():
    """An additive mask that requires grad (a learned position bias) gets the
    gradient PyTorch's SDPA gives it; it had none."""
    torch.manual_seed(2)
    q, k, v = _rand(1, 2, 5, 8), _rand(1, 2, 6, 8), _rand(1, 2, 6, 3)
    grads, values = [], _rand(2, 5, 6)
    for att in (ops.attention, F.scaled_dot_product_attention):
        bias = values.clone().requires_grad_()
        att(q, k, v, attn_mask=bias).square().sum().backward()
        grads.append(bias.grad)
    assert grads[0] is not None
    _close(grads[0], grads[1])
