"""pypto.torch.empty: big operator outputs come from a pool of recycled buffers, reused
only once no tensor, view or array of them is alive."""

import gc

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import autotune.torch  # noqa: E402, F401  (registers the operators)
import pypto as pt  # noqa: E402
import pypto.torch as ptt  # noqa: E402

ops = torch.ops.pypto
BIG = (512, 1024)  # 2 MiB of float32: pooled


def _ptr(t):
    return t.untyped_storage().data_ptr()


def test_a_freed_output_buffer_is_reused_and_aligned():
    a = ptt.empty(BIG, torch.float32)
    assert a.shape == BIG and a.dtype == torch.float32 and a.is_contiguous()
    assert a.data_ptr() % 64 == 0
    p = _ptr(a)
    del a
    gc.collect()
    assert _ptr(ptt.empty(BIG, torch.float32)) == p


@pytest.mark.parametrize("keep", ["tensor", "view", "numpy"])
def test_a_buffer_in_use_is_not_handed_out_again(keep):
    a = ptt.empty(BIG, torch.float32)
    held = {"tensor": a, "view": a[3:, 5:].t(), "numpy": a.numpy()[1]}[keep]
    p = _ptr(a)
    del a
    gc.collect()
    b = ptt.empty(BIG, torch.float32)
    assert _ptr(b) != p
    del held, b
    gc.collect()
    assert _ptr(ptt.empty(BIG, torch.float32)) == p  # the first idle one again


def test_small_outputs_are_plain_tensors():
    a = ptt.empty((4, 8), torch.float64)
    assert a.shape == (4, 8) and a.dtype == torch.float64
    assert a.untyped_storage().nbytes() == 4 * 8 * 8


def test_a_kept_operator_result_survives_later_calls():
    g = torch.Generator().manual_seed(0)
    x1, x2 = (torch.randn(*BIG, generator=g) for _ in range(2))
    w = torch.ones(BIG[1])
    y1 = ops.rms_norm(x1, w, 1e-6)
    want = (x1 * torch.rsqrt(x1.pow(2).mean(-1, keepdim=True) + 1e-6)).clone()
    for _ in range(3):  # dropped results: their buffers go back to the pool
        ops.rms_norm(x2, w, 1e-6)
    y2 = ops.softmax(x2, -1)
    torch.testing.assert_close(y1, want, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(y2, torch.softmax(x2, -1), atol=2e-6, rtol=2e-5)
    assert _ptr(y1) != _ptr(y2)


def test_empty_cache_releases_idle_buffers_only():
    pool = ptt.BufferPool(max_bytes=64 << 20)
    busy = pool.take(3 << 20)
    idle = pool.take(5 << 20)
    del idle
    assert pool.nbytes == 8 << 20
    pool.clear_idle()
    assert pool.nbytes == 3 << 20
    assert not np.shares_memory(pool.take(3 << 20), busy)


def test_the_pool_stays_under_its_limit():
    pool = ptt.BufferPool(max_bytes=4 << 20)
    held = [pool.take(3 << 20) for _ in range(3)]
    assert pool.nbytes == 3 << 20 and all(b.nbytes == 3 << 20 for b in held)


def test_norm_gradients_over_no_rows_are_zeros():
    """The weight and bias gradients sum over the rows: with none they are 0, as
    PyTorch's (they were left as the pool's old bytes)."""
    torch.full((1 << 12,), 12345.0)  # a freed buffer of garbage for the pool to hand out
    x = torch.randn(0, 4, requires_grad=True)
    w, b = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)
    torch.ops.pypto.layer_norm(x, w, b).sum().backward()
    w2 = torch.randn(4, requires_grad=True)
    torch.ops.pypto.rms_norm(torch.randn(0, 4), w2).sum().backward()
    for g in (w.grad, b.grad, w2.grad):
        assert torch.equal(g, torch.zeros(4))


def test_a_tensor_with_its_negative_bit_is_refused_not_read_unnegated():
    A = pt.placeholder((4,), "float32", name="A")
    B = pt.compute((4,), lambda i: A[i] * 1.0, name="B")
    mod = pt.build(pt.create_schedule(B.op), [A, B])
    lazy = torch._neg_view(torch.arange(1.0, 5.0))
    with pytest.raises(TypeError, match="argument A: a tensor with its negative bit set"):
        mod(lazy)
    np.testing.assert_array_equal(mod(lazy.resolve_neg()), -np.arange(1.0, 5.0))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_tensors_autograd_tracks_or_not_strided_are_refused_for_every_dtype(dtype):
    """bfloat16 goes through a view of its bits: it was written with requires_grad set,
    and its negative bit and sparse layout met PyTorch's own errors."""
    n = pt.var("n")
    A = pt.placeholder((n,), dtype, name="A")
    C = pt.compute((n,), lambda i: A[i], name="C")
    mod = pt.build(pt.create_schedule(C.op), [A, C])
    a = torch.arange(1, 5, dtype=getattr(torch, dtype))
    leaf = torch.zeros(4, dtype=a.dtype, requires_grad=True)
    with pytest.raises(TypeError, match="argument C: a tensor that requires grad"):
        mod(a, leaf)
    assert torch.equal(leaf.detach(), torch.zeros(4, dtype=a.dtype))  # not written
    with pytest.raises(TypeError, match="argument A: a tensor with its negative bit set"):
        mod(torch._neg_view(a))
    with pytest.raises(TypeError, match="argument A: a torch.sparse_coo tensor; pass"):
        mod(a.to_sparse())
    assert torch.equal(mod(a), a)


def _plus_100():
    A = pt.placeholder((4,), "float32", name="A")
    W = pt.compute((4,), lambda i: A[i] + 100.0, name="W")
    return pt.build(pt.create_schedule(W.op), [A, W])


def test_a_tensor_a_module_writes_moves_its_version_counter():
    """Was: autograd used the overwritten values (x.grad 100s for 2s), as PyTorch's own
    in-place write would have made backward() refuse."""
    mod = _plus_100()
    x, w = torch.ones(4, requires_grad=True), torch.full((4,), 2.0)
    y = (x * w).sum()
    mod(torch.zeros(4), w)
    assert w._version == 1
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()
    mod.time_evaluator(number=2, repeat=1)(torch.zeros(4), w)
    assert w._version == 2


def test_the_moe_operator_sees_a_module_write_its_weights():
    """Its packed weights are keyed to the version counter: a module's write is seen."""
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(0)
    E, d, ff, T = 2, 16, 32, 8
    wg, wu, wd = (torch.randn(E, a, b, generator=g) * 0.3 for a, b in ((ff, d), (ff, d), (d, ff)))
    x = torch.randn(T, d, generator=g)
    tw, ti = torch.ones(T, 1), torch.zeros(T, 1, dtype=torch.int64)
    ops.moe(x, wg, wu, wd, tw, ti)
    A = pt.placeholder((1,), "float32", name="A")
    B = pt.compute((1,), lambda i: A[i] + 100.0, name="B")
    # one weight, none of the 64 the cache samples (every numel // 64-th from the first)
    pt.build(pt.create_schedule(B.op), [A, B])(torch.zeros(1), wd[0, 0, 1:2])
    want = (F.silu(x @ wg[0].T) * (x @ wu[0].T)) @ wd[0].T
    torch.testing.assert_close(ops.moe(x, wg, wu, wd, tw, ti), want, rtol=1e-4, atol=1e-4)


def test_an_inference_tensor_is_written_only_in_inference_mode():
    mod = _plus_100()
    with torch.inference_mode():
        t = torch.zeros(4)
    with pytest.raises(ValueError, match="argument W is an inference tensor"):
        mod(torch.zeros(4), t)
    assert (t == 0).all()
    with torch.inference_mode():
        mod(torch.zeros(4), t)
    assert (t == 100).all()


def test_a_repeat_call_of_tensors_keeps_every_check_of_the_first():
    """After a call of plain tensors, one of the same shapes passes their data pointers
    straight to the kernel; any call the first's checks would refuse is refused still,
    and a written tensor's version moves."""
    mod = _plus_100()
    a, w = torch.arange(4.0), torch.empty(4)
    for k in range(3):  # the first through the checks, the others straight
        mod(a, w)
        assert torch.equal(w, a + 100) and w._version == k + 1
    assert len(mod._torch_checked) == 1  # the shapes the straight calls take
    with pytest.raises(TypeError, match="argument A: a tensor that requires grad"):
        mod(a.clone().requires_grad_(), w)
    with pytest.raises(ValueError, match="argument W is not C-contiguous"):
        mod(a, torch.empty(8)[::2])
    with pytest.raises(ValueError, match="arguments A and W overlap"):
        mod(w, w)
    with torch.inference_mode():
        t = torch.zeros(4)
    with pytest.raises(ValueError, match="argument W is an inference tensor"):
        mod(a, t)
    assert (t == 0).all()
    with pytest.raises(ValueError, match="argument A: dimension 0 is 5, expected 4"):
        mod(torch.arange(5.0), w)
    mod(a.double().float(), w)  # another tensor of the same shape: its own pointer
    assert torch.equal(w, a + 100) and w._version == 4


def test_bfloat16_tensors_pass_through_their_bits():
    """Was: "Unsupported dtype in DLTensor" (numpy's DLPack has no bfloat16)."""
    pytest.importorskip("ml_dtypes")
    B = pt.placeholder((4,), "bfloat16", name="B")
    C = pt.compute((4,), lambda i: B[i] * 2.0, name="C")
    mod = pt.build(pt.create_schedule(C.op), [B, C])
    b = torch.tensor([1.5, 2, -3, 4], dtype=torch.bfloat16)
    c = torch.empty(4, dtype=torch.bfloat16)
    mod(b, c)
    assert torch.equal(c, b * 2) and c._version == 1
    got = mod(b)  # allocated: a bfloat16 tensor, through its bits
    assert got.dtype == torch.bfloat16 and torch.equal(got, b * 2)


def test_outputs_a_call_allocates_are_tensors_when_an_input_is_one():
    """Was: numpy arrays whatever the inputs (a torch user got ``ndarray`` back)."""
    A = pt.placeholder((3,), "float32", name="A")
    B = pt.placeholder((3,), "int32", name="B")
    S, P = pt.compute((3,), lambda i: (A[i] + B[i].astype("float32"), B[i] * 2), name="SP")
    mod = pt.build(pt.create_schedule(S.op), [A, B, S, P])
    a, b = np.array([1.5, 2, 3], np.float32), np.array([1, 2, 3], np.int32)
    s, p = mod(torch.from_numpy(a), b)  # one input a tensor: tensors, as torch returns
    assert isinstance(s, torch.Tensor) and isinstance(p, torch.Tensor)
    assert (s.dtype, p.dtype) == (torch.float32, torch.int32)
    assert s.tolist() == [2.5, 4, 6] and p.tolist() == [2, 4, 6]
    assert s.data_ptr() % 64 == 0  # the aligned buffer itself, not a copy
    s2, p2 = mod(a, b)
    assert isinstance(s2, np.ndarray) and np.array_equal(s2, s.numpy())
    assert np.array_equal(p2, [2, 4, 6])
