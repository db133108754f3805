"""The row-wise operators' modules for any row count (``torch_call.rows_module``): a
new batch or sequence length builds nothing; a shape a record names keeps its own."""

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import autotune as at  # noqa: E402
import autotune.torch  # noqa: E402, F401  (registers the operators)
from autotune.templates.norm import SHORT_ROW  # noqa: E402

ops = torch.ops.pypto


CASES = {  # name: (ours, PyTorch's, with a second argument: a weight, or dy)
    "rms_norm": (lambda x, w: ops.rms_norm(x, w, 1e-6),
                 lambda x, w: F.rms_norm(x, (x.shape[-1],), w, 1e-6), True),
    "layer_norm": (lambda x, w: ops.layer_norm(x, w, w, 1e-5),
                   lambda x, w: F.layer_norm(x, (x.shape[-1],), w, w, 1e-5), True),
    "softmax": (lambda x: ops.softmax(x, -1), lambda x: torch.softmax(x, -1), False),
    "gelu": (lambda x: ops.gelu(x, "tanh"), lambda x: F.gelu(x, approximate="tanh"), False),
    "gelu_backward": (lambda x, dy: ops.gelu_backward(x, dy, "none"),
                      lambda x, dy: torch.ops.aten.gelu_backward(dy, x), True),
    "softmax_backward": (lambda y, dy: ops.softmax_backward(y, dy, -1),
                         lambda y, dy: torch._softmax_backward_data(dy, y, -1, y.dtype), True),
}  # fmt: skip
TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", sorted(CASES))
def test_every_row_count_runs_one_module(kernels, name, dtype):
    """Inputs of 1, 2, 37 and 300 rows (as [.., 99] tensors of any leading shape) run
    one module whose rows are a size bound at call, forward and (softmax's, gelu's)
    backward; each result is PyTorch's."""
    ours, theirs, weighted = CASES[name]
    g = torch.Generator().manual_seed(0)
    w = (1 + 0.1 * torch.randn(99, generator=g)).to(dtype)
    for shape in ((1, 99), (2, 99), (37, 99), (3, 100, 99), (2, 99)):
        x = torch.randn(shape, generator=g).to(dtype)
        if name == "softmax_backward":
            x = torch.softmax(x.float(), -1).to(dtype)
        second = torch.randn(shape, generator=g).to(dtype) if name.endswith("backward") else w
        args = (x, second) if weighted else (x,)
        want = theirs(*(a.float() for a in args)).to(dtype)
        torch.testing.assert_close(ours(*args), want, rtol=TOL[dtype], atol=TOL[dtype])
    assert len(kernels) == 5 and len({id(m) for m in kernels}) == 1
    assert [str(v) for v in kernels[0].signature.size_vars] == ["rows"]


def test_recorded_rows_and_short_rows_keep_their_own_modules(kernels):
    """A record of the operator's exact workload builds that shape's module with its
    config (no sizes bound at call); rows of at most SHORT_ROW columns are built per
    shape (blocks of rows); both give PyTorch's results."""
    g = torch.Generator().manual_seed(1)
    task = at.Task("softmax", (6, 99))
    rec = at.Record(task.workload_key, task.target.key, task.config_space.default_config().values,
                    [1e-4])  # fmt: skip
    x = torch.randn(6, 99, generator=g)
    with at.apply_history_best([rec]):
        torch.testing.assert_close(ops.softmax(x, -1), torch.softmax(x, -1))
    assert kernels[-1].signature.size_vars == ()
    for rows in (5, 6):
        xs = torch.randn(rows, SHORT_ROW, generator=g)
        torch.testing.assert_close(ops.softmax(xs, -1), torch.softmax(xs, -1))
    assert [m.signature.size_vars for m in kernels[-2:]] == [(), ()]
    assert kernels[-1] is not kernels[-2]
