"""Plans (``pypto.torch_plan``): an operator's later calls of the same shapes, dtypes
and scalars replay its first call's kernel without running its body; every other call
runs the body. Each test checks the results against PyTorch or numpy and counts which
bodies and kernels ran."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
F = torch.nn.functional

from fuzzing import REPEATABLE as FUZZ  # noqa: E402

import autotune.torch as at_torch  # noqa: E402
import autotune.torch_call as torch_call  # noqa: E402
import autotune.torch_decode as torch_decode  # noqa: E402
import pypto as pt  # noqa: E402
import pypto.module  # noqa: E402
import pypto.torch as ptt  # noqa: E402
import pypto.torch_plan as torch_plan  # noqa: E402
from autotune import apply_history_best  # noqa: E402

ops = torch.ops.pypto


@pytest.fixture
def spies(monkeypatch):
    """``(bodies, kernels)``: the template names ``call`` (or the module names ``run``)
    got: an operator's body ran; and the modules whose kernel ran, by name, in order."""
    torch_plan.forget()
    bodies, kernels = [], []
    call, run, invoke = at_torch.call, torch_decode.run, pypto.module.Module._invoke

    def spy_call(name, *a, **k):
        bodies.append(name)
        return call(name, *a, **k)

    def spy_invoke(self, cargs, arrays):
        kernels.append(self.name)
        return invoke(self, cargs, arrays)

    def spy_run(mod, *a):  # (the bodies that run a module of their own: attention's steps)
        bodies.append(mod.name)
        return run(mod, *a)

    monkeypatch.setattr(at_torch, "call", spy_call)
    monkeypatch.setattr(torch_decode, "run", spy_run)
    monkeypatch.setattr(pypto.module.Module, "_invoke", spy_invoke)
    yield bodies, kernels
    torch_plan.forget()


def _close(a, b, tol=1e-5):
    assert a.shape == b.shape and a.dtype == b.dtype
    torch.testing.assert_close(a, b, rtol=tol, atol=tol)


CASES = {  # name: (ours, PyTorch's, the arguments' shapes)
    "attention": (
        ops.attention,
        F.scaled_dot_product_attention,
        [(1, 4, 1, 16), (1, 4, 37, 16), (1, 4, 37, 8)],
    ),
    "gelu": (lambda x: ops.gelu(x, "tanh"), lambda x: F.gelu(x, approximate="tanh"), [(3, 5, 33)]),
    "rms_norm": (
        lambda x, w: ops.rms_norm(x, w, 1e-6),
        lambda x, w: F.rms_norm(x, (33,), w, 1e-6),
        [(2, 7, 33), (33,)],
    ),
    "layer_norm": (
        lambda x, w, b: ops.layer_norm(x, w, b, 1e-5),
        lambda x, w, b: F.layer_norm(x, (33,), w, b, 1e-5),
        [(7, 33), (33,), (33,)],
    ),
    "softmax": (lambda x: ops.softmax(x, -1), lambda x: torch.softmax(x, -1), [(4, 3, 33)]),
    "softmax_backward": (
        lambda y, dy: ops.softmax_backward(y, dy, -1),
        lambda y, dy: torch._softmax_backward_data(dy, y, -1, y.dtype),
        [(6, 33), (6, 33)],
    ),
    "gelu_backward": (
        lambda x, dy: ops.gelu_backward(x, dy, "none"),
        lambda x, dy: torch.ops.aten.gelu_backward(dy, x),
        [(2, 3, 33), (2, 3, 33)],
    ),
    "layer_norm_backward": (
        lambda x, w, dy: ops.layer_norm_backward(x, w, dy, 1e-5),
        lambda x, w, dy: torch.func.vjp(
            lambda x, w, b: F.layer_norm(x, (33,), w, b, 1e-5), x, w, torch.zeros(33)
        )[1](dy),  # fmt: skip
        [(9, 33), (33,), (9, 33)],
    ),
}


def _tuple(y):
    return y if isinstance(y, tuple) else (y,)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_second_call_of_the_same_shapes_replays_the_kernel(spies, name):
    """The body runs once per key; the kernel on every call, on each call's own data,
    outputs fresh (no views, no storage shared with an earlier result)."""
    bodies, kernels = spies
    ours, theirs, shapes = CASES[name]
    got = []
    for seed in range(3):
        torch.manual_seed(seed)
        args = [torch.randn(s) for s in shapes]
        y, want = _tuple(ours(*args)), _tuple(theirs(*args))
        for a, r in zip(y, want, strict=True):
            _close(a, r)
            assert a._base is None and a.is_contiguous()
        got.append(y)
    assert len(bodies) == 1 and len(kernels) == 3, (bodies, kernels)
    ptrs = [t.data_ptr() for g in got for t in g]
    assert len(set(ptrs)) == len(ptrs)


def test_a_parameter_weight_is_planned_and_differentiated():
    """nn.Parameter weights (a model's): planned under no_grad; with grad enabled the
    autograd path, whose gradient is PyTorch's."""
    torch.manual_seed(1)
    x, w = torch.randn(4, 33), torch.nn.Parameter(torch.randn(33))
    with torch.no_grad():
        for _ in range(2):
            _close(ops.rms_norm(x, w, 1e-6), F.rms_norm(x, (33,), w, 1e-6))
    for _ in range(2):
        w.grad = None
        ops.rms_norm(x, w, 1e-6).square().sum().backward()
        ours = w.grad.clone()
        w.grad = None
        F.rms_norm(x, (33,), w, 1e-6).square().sum().backward()
        _close(ours, w.grad)


def test_calls_a_plan_cannot_replay_run_the_body(spies):
    """A transposed input (copied by the body), a softmax over another dim (moved and
    copied back), the same tensor passed twice (which argument is which?) and an empty
    tensor run the body every time, and give PyTorch's results; a plan made from
    distinct tensors serves a later call that passes one twice."""
    bodies, kernels = spies
    torch.manual_seed(2)
    x = torch.randn(33, 6)
    for _ in range(2):
        _close(ops.gelu(x.t(), "none"), F.gelu(x.t()))
        _close(ops.softmax(x, 0), torch.softmax(x, 0))
    y = torch.softmax(torch.randn(5, 33), -1)
    for _ in range(2):
        _close(ops.softmax_backward(y, y, -1), torch._softmax_backward_data(y, y, -1, y.dtype))
    assert len(bodies) == 6
    bodies.clear()
    dy = torch.randn(5, 33)
    _close(ops.softmax_backward(y, dy, -1), torch._softmax_backward_data(dy, y, -1, y.dtype))
    _close(ops.softmax_backward(dy, dy, -1), torch._softmax_backward_data(dy, dy, -1, y.dtype))
    assert len(bodies) == 1 and kernels[-2:] == ["softmax_backward"] * 2
    for _ in range(2):
        assert ops.gelu(torch.empty(0, 4), "none").shape == (0, 4)


def test_plans_are_per_history_best_scope_and_thread_count(spies):
    """Each apply_history_best context (whose records choose the module) and thread
    count inside it has plans of its own: its first call of a shape runs the body."""
    bodies, _ = spies
    x = torch.randn(3, 33)
    threads = pt.get_num_threads()
    ops.softmax(x, -1)
    for _ in range(2):
        with apply_history_best([]):
            for _ in range(2):
                _close(ops.softmax(x, -1), torch.softmax(x, -1))
            with apply_history_best([]):
                ops.softmax(x, -1)
            ops.softmax(x, -1)
            pt.set_num_threads(threads + 1)
            try:
                ops.softmax(x, -1)
                ops.softmax(x, -1)
            finally:
                pt.set_num_threads(threads)
    ops.softmax(x, -1)
    assert bodies == ["softmax"] * 7


def test_forward_mode_and_a_cleared_cache_run_the_body(spies):
    """Under forward-mode AD, and after the modules are cleared (``ModuleCache.clear``),
    the body runs."""
    bodies, _ = spies
    torch.manual_seed(3)
    x, t = torch.randn(3, 33), torch.randn(3, 33)
    ops.softmax(x, -1)
    bodies.clear()
    ops.softmax(x, -1)
    assert bodies == []
    ops.softmax(x.double(), -1)  # (another key)
    assert bodies == ["softmax_fwd"]
    bodies.clear()
    _, tangent = torch.func.jvp(lambda u: ops.softmax(u, -1), (x,), (t,))
    _close(tangent, torch.func.jvp(lambda u: torch.softmax(u, -1), (x,), (t,))[1])
    assert bodies == ["softmax", "softmax_backward"]  # (the tangent's)
    ops.softmax(x, -1)
    assert len(bodies) == 2
    torch_call.MODULES.clear()
    ops.softmax(x, -1)
    assert len(bodies) == 3


def _gather():
    n, m = pt.var("n"), pt.var("m")
    X = pt.placeholder((n,), "float32", name="X")
    Idx = pt.placeholder((m,), "int64", name="I")
    Y = pt.compute((m,), lambda i: X[Idx[i]], name="Y")
    return pt.create_schedule(Y.op), [X, Idx, Y]


def test_a_user_operator_is_planned_and_keeps_its_index_checks(spies):
    """``pypto.torch.custom_op``: replayed per shape; an index read from data out of
    range still raises the kernel's IndexError on a replayed call."""
    _, kernels = spies
    op = ptt.custom_op("pypto_test::plan_gather", _gather, n_inputs=2)
    x = torch.randn(7)
    for idx in ([6, 0, 2], [1, 1, 5], [3, 4]):
        i = torch.tensor(idx)
        _close(op(x, i), x[i])
    with pytest.raises(IndexError, match="plan_gather: an index into X computed from data"):
        op(x, torch.tensor([1, 7, 0]))
    with pytest.raises(IndexError, match="plan_gather: an index into X computed from data"):
        op(x, torch.tensor([-1, 2, 0]))
    assert kernels == ["plan_gather"] * 5


def test_an_operator_inside_another_body_keeps_that_body_unplanned(spies):
    """A planned body that calls a planned operator is not planned itself (the inner
    call hides what its kernel read): it runs every time."""
    outer_runs = []
    double = ptt.custom_op("pypto_test::plan_double", _double, n_inputs=1)

    @torch_plan.planned
    def outer(x):
        outer_runs.append(1)
        return double(x)

    x = torch.randn(4, 5)
    for _ in range(3):
        _close(outer(x), x * 2)
    assert len(outer_runs) == 3


def _double(x_shape):
    X = pt.placeholder(x_shape, "float32", name="X")
    Y = pt.compute(x_shape, lambda i, j: X[i, j] * 2, name="Y")
    return pt.create_schedule(Y.op), [X, Y]


_FUZZ_OPS = {  # name: (ours, PyTorch's, number of row-shaped tensors, takes a weight)
    "gelu": (lambda x: ops.gelu(x, "none"), lambda x: F.gelu(x), 1, False),
    "softmax": (lambda x: ops.softmax(x, -1), lambda x: torch.softmax(x, -1), 1, False),
    "gelu_backward": (lambda x, dy: ops.gelu_backward(x, dy, "none"),
                      lambda x, dy: torch.ops.aten.gelu_backward(dy, x), 2, False),
    "softmax_backward": (lambda y, dy: ops.softmax_backward(y, dy, -1),
                         lambda y, dy: torch._softmax_backward_data(dy, y, -1, y.dtype), 2, False),
    "rms_norm": (lambda x, w: ops.rms_norm(x, w, 1e-6),
                 lambda x, w: F.rms_norm(x, (x.shape[-1],), w, 1e-6), 1, True),
}  # fmt: skip


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(sorted(_FUZZ_OPS)), st.sampled_from([2, 5]),
                          st.sampled_from(["plain", "transposed", "aliased", "parameter"]),
                          st.integers(0, 2**16)), min_size=4, max_size=10))  # fmt: skip
def test_any_sequence_of_calls_gives_pytorchs_results(calls):
    """Calls of mixed operators, shapes and layouts (transposed inputs, one tensor
    passed twice, nn.Parameter weights) in any order, plans made and replayed among
    them: every result is PyTorch's."""
    for name, rows, layout, seed in calls:
        ours, theirs, n, weighted = _FUZZ_OPS[name]
        g = torch.Generator().manual_seed(seed)
        if layout == "transposed":
            xs = [torch.randn(33, rows, generator=g).t() for _ in range(n)]
        else:
            xs = [torch.randn(rows, 33, generator=g) for _ in range(n)]
        if layout == "aliased" and n == 2:
            xs[1] = xs[0]
        if name == "softmax_backward":
            xs[0] = torch.softmax(xs[0], -1)
            if layout == "aliased":
                xs[1] = xs[0]
        args = xs + ([torch.randn(33, generator=g)] if weighted else [])
        if layout == "parameter" and weighted:
            args[-1] = torch.nn.Parameter(args[-1])
        with torch.no_grad():
            _close(ours(*args), theirs(*args))
