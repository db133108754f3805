"""torch.ops.pypto.*: against PyTorch's own compositions, forward and backward, eager
and under torch.compile(fullgraph=True); gradcheck in float64; pypto.torch.custom_op."""

import os
import re
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import autotune as at  # noqa: E402
import autotune.torch  # noqa: E402, F401  (registers the operators)
import autotune.torch_call  # noqa: E402
import pypto as pt  # noqa: E402
import pypto.torch as ptt  # noqa: E402

ops = torch.ops.pypto


def _seed():
    torch.manual_seed(0)


def _close(a, b, tol=2e-5):
    torch.testing.assert_close(a, b, atol=tol, rtol=tol)


def _rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


NAN = float("nan")

CASES = {
    "gelu": (lambda x, w, b: ops.gelu(x), lambda x, w, b: F.gelu(x)),
    "gelu_tanh": (
        lambda x, w, b: ops.gelu(x, "tanh"),
        lambda x, w, b: F.gelu(x, approximate="tanh"),
    ),
    "rms_norm": (lambda x, w, b: ops.rms_norm(x, w, 1e-6), lambda x, w, b: _rms(x, w, 1e-6)),
    "layer_norm": (
        lambda x, w, b: ops.layer_norm(x, w, b, 1e-5),
        lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b, 1e-5),
    ),
    "softmax": (lambda x, w, b: ops.softmax(x, -1), lambda x, w, b: torch.softmax(x, -1)),
    "softmax_dim0": (lambda x, w, b: ops.softmax(x, 0), lambda x, w, b: torch.softmax(x, 0)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_forward_and_backward_match_torch(case):
    _seed()
    ours, theirs = CASES[case]
    x = torch.randn(3, 5, 37, requires_grad=True)
    w = torch.randn(37, requires_grad=True)
    b = torch.randn(37, requires_grad=True)
    dy = torch.randn(3, 5, 37)
    y1, y2 = ours(x, w, b), theirs(x, w, b)
    _close(y1, y2)
    g1 = torch.autograd.grad(y1, (x, w, b), dy, allow_unused=True)
    g2 = torch.autograd.grad(y2, (x, w, b), dy, allow_unused=True)
    for a, c in zip(g1, g2):
        assert (a is None) == (c is None)
        if a is not None:
            _close(a, c, 1e-4)


@pytest.mark.parametrize("case", ["gelu", "gelu_tanh", "rms_norm", "layer_norm", "softmax_dim0"])
def test_gradcheck_float64(case):
    _seed()
    ours, _ = CASES[case]
    x = torch.randn(3, 6, dtype=torch.float64, requires_grad=True)
    w = torch.randn(6, dtype=torch.float64, requires_grad=True)
    b = torch.randn(6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(ours, (x, w, b))


@pytest.mark.parametrize("causal,scale", [(False, None), (True, 0.2)])
def test_attention_matches_sdpa(causal, scale):
    _seed()
    q, k, v = (torch.randn(2, 3, 29, 16) for _ in range(3))
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    _close(ops.attention(q, k, v, causal, scale), ref)


def test_attention_causal_in_chunks_and_cross_attention():
    _seed()
    q, k, v = (torch.randn(1, 2, 300, 16) for _ in range(3))  # causal: 2 chunks of queries
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    _close(ops.attention(q, k, v, True, None), ref)
    k, v = torch.randn(1, 2, 41, 16), torch.randn(1, 2, 41, 16)  # 41 keys for 300 queries
    _close(ops.attention(q, k, v, False, 0.3), F.scaled_dot_product_attention(q, k, v, scale=0.3))


@pytest.mark.parametrize("S,Sk", [(7, 19), (19, 7), (12, 12)])
@pytest.mark.parametrize("causal", [True, False])
def test_attention_key_counts_and_value_dims_as_sdpa(S, Sk, causal):
    """Any number of keys, causal or not (PyTorch's mask: query i sees keys j <= i, so
    with fewer keys than queries the later queries see them all), and values of their
    own width (SDPA's Ev): the output is [B, H, S, Dv]."""
    _seed()
    q, k = torch.randn(2, 3, S, 16), torch.randn(2, 3, Sk, 16)
    for dv in (16, 40, 5):
        v = torch.randn(2, 3, Sk, dv)
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        got = ops.attention(q, k, v, causal, None)
        assert got.shape == (2, 3, S, dv)
        _close(got, ref)


@pytest.mark.parametrize("H,Hk,S,Sk", [(8, 2, 17, 17), (6, 3, 9, 21), (4, 1, 23, 7)])
def test_attention_grouped_query_as_sdpa(H, Hk, S, Sk):
    """``enable_gqa``: k and v with fewer heads, each serving H / Hkv query heads (no
    copies); without it their heads must be q's."""
    _seed()
    q, k, v = torch.randn(2, H, S, 16), torch.randn(2, Hk, Sk, 16), torch.randn(2, Hk, Sk, 24)
    for causal in (False, True):
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        _close(ops.attention(q, k, v, causal, None, True), ref)
    with pytest.raises(ValueError, match=r"attention: k has shape .* Hkv is q's H, or with"):
        ops.attention(q, k, v, False, None)
    bad = torch.randn(2, 5, Sk, 16)  # 5 heads do not divide H
    with pytest.raises(ValueError, match=r"attention: k has shape \(2, 5,"):
        ops.attention(q, bad, bad, False, None, True)


def test_attention_runs_the_record_of_the_workload_pypto_tune_names():
    """The operator's workload is the template's arguments without trailing defaults,
    as ``pypto-tune attention --args 1,2,24,8,True`` and the standard workloads name
    it: a record of that workload is the config the operator builds."""
    _seed()
    task = at.Task("attention", (1, 2, 24, 8, True))
    default = task.config_space.default_config().values
    assert default["form"] == "flash"
    rec = at.Record(task.workload_key, task.target.name, {**default, "form": "two_pass"}, [1e-4])
    want = pt.build(*task.instantiate(task.config_space.config(rec.config)), name="attention")
    want = want.source
    q, k, v = (torch.randn(1, 2, 24, 8) for _ in range(3))
    cache = autotune.torch_call.MODULES
    with at.apply_history_best([rec]):
        got = ops.attention(q, k, v, True, None)
        n = len(cache)  # the module the call built is the one of that workload:
        assert autotune.torch.module("attention", (1, 2, 24, 8, True)).source == want
        assert len(cache) == n  # not built again
    _close(got, F.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_attention_with_a_mask_as_sdpa():
    """``attn_mask``: bool (the keys that take part) or float (added), of any shape
    that broadcasts to the scores; a query left without keys gets zeros, as SDPA's;
    under torch.compile too; a mask that does not broadcast, of another dtype, or
    with is_causal is refused."""
    _seed()
    B, H, S, Sk = 2, 4, 9, 13
    q, k, v = torch.randn(B, H, S, 8), torch.randn(B, 2, Sk, 8), torch.randn(B, 2, Sk, 5)
    none = torch.ones(B, H, S, Sk, dtype=torch.bool)
    none[0, 1, 3] = False  # one query of one head sees no key
    for m in (torch.rand(B, 1, 1, Sk) < 0.7, torch.randn(S, Sk), torch.rand(H, S, Sk) < 0.5, none):
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True)
        _close(ops.attention(q, k, v, False, None, True, attn_mask=m), ref)
    m = torch.rand(B, 1, 1, Sk) < 0.7
    f = torch.compile(
        lambda q, k, v, m: ops.attention(q, k, v, enable_gqa=True, attn_mask=m) * 2,
        fullgraph=True,
    )
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True)
    _close(f(q, k, v, m), 2 * ref)
    with pytest.raises(ValueError, match=r"attn_mask has shape \(3, 1, 1, 13\), which does"):
        ops.attention(q, k, v, False, None, True, attn_mask=torch.rand(3, 1, 1, Sk) < 0.5)
    with pytest.raises(TypeError, match="attn_mask has dtype torch.float64, q has"):
        ops.attention(q, k, v, False, None, True, attn_mask=torch.randn(S, Sk).double())
    with pytest.raises(ValueError, match="attn_mask and is_causal at once"):
        ops.attention(q, k, v, True, None, True, attn_mask=m)


def test_attention_without_keys_gives_zeros_as_sdpa():
    q, k = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 0, 4)
    for causal in (False, True):
        ref = F.scaled_dot_product_attention(q, k, k, is_causal=causal)
        assert torch.equal(ops.attention(q, k, k, causal, None), ref)


def test_attention_with_its_own_value_dim_compiles_without_graph_breaks():
    _seed()
    q, k, v = torch.randn(1, 2, 9, 8), torch.randn(1, 2, 13, 8), torch.randn(1, 2, 13, 3)
    f = torch.compile(lambda q, k, v: ops.attention(q, k, v, True, None) * 2, fullgraph=True)
    _close(f(q, k, v), 2 * F.scaled_dot_product_attention(q, k, v, is_causal=True))


def _moe_loop(x, wg, wu, wd, tw, ti):
    out = torch.zeros_like(x)
    for e in range(wg.shape[0]):
        tok, slot = (ti == e).nonzero(as_tuple=True)
        h = F.silu(x[tok] @ wg[e].T) * (x[tok] @ wu[e].T)
        out.index_add_(0, tok, (h @ wd[e].T) * tw[tok, slot, None])
    return out


def _moe_inputs(T=21, d=24, f=40, E=4, k=2):
    _seed()
    x = torch.randn(T, d)
    wg, wu = torch.randn(E, f, d) / d**0.5, torch.randn(E, f, d) / d**0.5
    wd = torch.randn(E, d, f) / f**0.5
    tw, ti = torch.softmax(torch.randn(T, E), -1).topk(k, -1)
    return x, wg, wu, wd, tw, ti


def test_moe_matches_per_expert_loop():
    args = _moe_inputs()
    _close(ops.moe(*args), _moe_loop(*args))


_ROW_CASES = {  # name: (pypto operator, PyTorch's composition), both of (x, w, b)
    "gelu": (lambda x, w, b: ops.gelu(x, "tanh"), lambda x, w, b: F.gelu(x, approximate="tanh")),
    "rms_norm": (
        lambda x, w, b: ops.rms_norm(x, w, 1e-6),
        lambda x, w, b: F.rms_norm(x, (x.shape[-1],), w, 1e-6),
    ),
    "layer_norm": (
        lambda x, w, b: ops.layer_norm(x, w, b, 1e-5),
        lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5),
    ),
    "softmax": (lambda x, w, b: ops.softmax(x, -1), lambda x, w, b: torch.softmax(x, -1)),
}


@pytest.mark.parametrize("name", list(_ROW_CASES))
@pytest.mark.parametrize("dt,tol", [(torch.bfloat16, 8e-3), (torch.float16, 1e-3)])
def test_row_operators_in_16_bits(name, dt, tol):
    """bfloat16 and float16 in and out, computed in float32 and rounded once: within
    about one rounding of PyTorch's float32 result, forward and backward."""
    _seed()
    x = torch.randn(7, 45).to(dt)
    w, b = (1 + 0.1 * torch.randn(45)).to(dt), (0.1 * torch.randn(45)).to(dt)
    dy = torch.randn(7, 45).to(dt)
    op, ref = _ROW_CASES[name]
    x16 = x.clone().requires_grad_()
    y = op(x16, w, b)
    (y * dy).sum().backward()
    x32 = x.float().requires_grad_()
    y32 = ref(x32, w.float(), b.float())
    (y32 * dy.float()).sum().backward()
    assert y.dtype == x16.grad.dtype == dt
    torch.testing.assert_close(y.float(), y32, rtol=tol, atol=tol)
    scale = x32.grad.abs().max().item()
    torch.testing.assert_close(x16.grad.float(), x32.grad, rtol=tol, atol=tol * scale)


@pytest.mark.parametrize("dt,tol", [(torch.bfloat16, 8e-3), (torch.float16, 1e-3)])
def test_attention_in_16_bits(dt, tol):
    """float16 computed in float32; bfloat16 too, or on the target's bfloat16 dot
    kernels where it has them (P rounded to bfloat16 for P V, as PyTorch's): within
    about one rounding of PyTorch's float32 result."""
    _seed()
    q, k, v = (torch.randn(1, 2, 37, 16).to(dt) for _ in range(3))
    for causal in (False, True):
        o = ops.attention(q, k, v, causal, None)
        assert o.dtype == dt
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
        torch.testing.assert_close(o.float(), ref, rtol=tol, atol=tol)
    with pytest.raises(TypeError, match=r"attention: k has dtype torch.float32, q has"):
        ops.attention(q, k.float(), v, False, None)


@pytest.mark.parametrize("dt,tol", [(torch.bfloat16, 8e-3), (torch.float16, 1e-3)])
def test_16_bit_decode_steps_as_sdpa(dt, tol):
    """A decoder's step (a few queries per head; K and V read in place by the template's
    decode form): grouped heads, a mask of q's dtype, a causal call with fewer keys than
    queries; within a rounding of PyTorch's float32 result."""
    _seed()
    k, v = torch.randn(2, 2, 50, 24).to(dt), torch.randn(2, 2, 50, 24).to(dt)
    for S in (1, 3):
        q = torch.randn(2, 6, S, 24).to(dt)
        m = torch.randn(S, 50).to(dt)
        f32 = [t.float() for t in (q, k, v)]
        for causal, kv, mask in ((False, 50, None), (False, 50, m), (True, 2, None)):
            o = ops.attention(q, k[:, :, :kv], v[:, :, :kv], causal, None, True, attn_mask=mask)
            assert o.dtype == dt and o.shape == (2, 6, S, 24)
            ref = F.scaled_dot_product_attention(
                *(t[:, :, :kv] if t is not f32[0] else t for t in f32),
                is_causal=causal,
                enable_gqa=True,
                attn_mask=None if mask is None else mask.float(),
            )
            torch.testing.assert_close(o.float(), ref, rtol=tol, atol=tol)


def test_bfloat16_attention_with_a_head_the_tiles_take():
    """D = 64: on a target with a bfloat16 dot instruction the template's bfloat16 form
    (AMX's tiles or vdpbf16ps), elsewhere float32 arithmetic; either way within
    bfloat16's rounding of float32, with grouped heads, more keys than queries, and a
    bfloat16 mask."""
    _seed()
    q = torch.randn(1, 4, 40, 64).bfloat16()
    k, v = torch.randn(1, 2, 70, 64).bfloat16(), torch.randn(1, 2, 70, 64).bfloat16()
    m = torch.randn(40, 70).bfloat16()
    f32 = [t.float() for t in (q, k, v)]
    for causal, mask in ((False, None), (True, None), (False, m)):
        o = ops.attention(q, k, v, causal, None, True, attn_mask=mask)
        assert o.dtype == torch.bfloat16 and o.shape == (1, 4, 40, 64)
        ref = F.scaled_dot_product_attention(
            *f32, is_causal=causal, enable_gqa=True, attn_mask=None if mask is None else m.float()
        )
        torch.testing.assert_close(o.float(), ref, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("T,d,f", [(21, 24, 40), (40, 64, 96), (64, 128, 1024)])
def test_moe_in_bfloat16(T, d, f):
    """bfloat16 experts (the dot kernels where the host's target has them and the
    layer is a tile wide, AMX's tiles where it has them, at d_ff = 1024 over two
    K-blocks; else products and sums in float) within bfloat16's rounding of the float32
    loop on the same bfloat16 values."""
    args = [a.bfloat16() for a in _moe_inputs(T, d, f)[:5]]
    ti = _moe_inputs(T, d, f)[5]
    out = ops.moe(*args, ti)
    assert out.dtype == torch.bfloat16
    ref = _moe_loop(*(a.float() for a in args), ti)
    torch.testing.assert_close(out.float(), ref, rtol=2e-2, atol=2e-2 * ref.abs().max().item())


def test_moe_in_float16_is_computed_in_float32():
    """float16 (no dot kernel for it): x and the weights widened, the output rounded
    once; within float16's rounding of the float32 loop on the same values."""
    x, wg, wu, wd, tw, ti = _moe_inputs()
    args = [a.half() for a in (x, wg, wu, wd, tw)]
    out = ops.moe(*args, ti)
    assert out.dtype == torch.float16
    ref = _moe_loop(*(a.float() for a in args), ti)
    torch.testing.assert_close(out.float(), ref, rtol=2e-3, atol=2e-3 * ref.abs().max().item())
    with pytest.raises(TypeError, match=r"moe: w_up has dtype torch.float32, x has torch.float16"):
        ops.moe(args[0], args[1], wu, *args[3:], ti)


def test_moe_weights_in_reused_memory_are_packed_again():
    """The packed-weights cache is keyed by memory, shape and version counter; memory
    that another tensor takes over (version 0 again) must not hit the old entry."""
    x, wg, wu, wd, tw, ti = _moe_inputs()
    mem = wg.numpy().copy()
    first = torch.from_numpy(mem)
    _close(ops.moe(x, first, wu, wd, tw, ti), _moe_loop(x, first, wu, wd, tw, ti))
    del first
    mem *= -1.5  # not seen by any version counter
    again = torch.from_numpy(mem)  # same memory, shape, strides, version 0
    _close(ops.moe(x, again, wu, wd, tw, ti), _moe_loop(x, again, wu, wd, tw, ti))


def test_moe_weights_written_behind_the_version_counter_are_packed_again():
    """``.data`` writes and numpy views do not bump ``_version``: the sampled weights
    show the change (the packed panels of the old weights ran)."""
    x, wg, wu, wd, tw, ti = _moe_inputs()
    _close(ops.moe(x, wg, wu, wd, tw, ti), _moe_loop(x, wg, wu, wd, tw, ti))
    wg.data.mul_(2.0)
    _close(ops.moe(x, wg, wu, wd, tw, ti), _moe_loop(x, wg, wu, wd, tw, ti))
    wu.numpy()[:] *= -0.5
    _close(ops.moe(x, wg, wu, wd, tw, ti), _moe_loop(x, wg, wu, wd, tw, ti))
    # one weight, likely not a sampled one: the sampling cannot promise to see it, the
    # release does
    wg.data[:, 1, 1] += 5.0
    autotune.torch.release_packed_weights()
    _close(ops.moe(x, wg, wu, wd, tw, ti), _moe_loop(x, wg, wu, wd, tw, ti))


def test_moe_weights_written_in_inference_mode_are_seen():
    """An inference tensor has no version counter: a write to one row of one expert
    (none of the 64 sampled weights) ran the panels packed before it."""
    x, wg, wu, wd, tw, ti = _moe_inputs(d=64, f=128, E=8)
    with torch.inference_mode():
        wg, wu, wd = (w.clone() for w in (wg, wu, wd))
        _close(ops.moe(x, wg, wu, wd, tw, ti), _moe_loop(x, wg, wu, wd, tw, ti))
        wg[ti[0, 0], 7, :] = 5.0
        _close(ops.moe(x, wg, wu, wd, tw, ti), _moe_loop(x, wg, wu, wd, tw, ti))


def test_moe_weights_that_require_grad_written_through_data_are_seen():
    """``.data`` writes (``torch.autograd.gradcheck``'s, an optimizer's of old) to
    weights that require grad: one weight changed, the next call uses it."""
    x, wg, wu, wd, tw, ti = _moe_inputs(d=64, f=128, E=8)
    wu.requires_grad_()
    with torch.no_grad():
        _close(ops.moe(x, wg, wu, wd, tw, ti), _moe_loop(x, wg, wu, wd, tw, ti))
        wu.data[ti[0, 0], 9, 3] += 5.0
        _close(ops.moe(x, wg, wu, wd, tw, ti), _moe_loop(x, wg, wu, wd, tw, ti))


def test_moe_gradients_pass_by_an_expert_no_token_is_routed_to():
    """An unused expert's weights (inf here: pruned, never initialized) stay out of the
    derivatives, as they stay out of the output: its dense recomputation made them NaN."""
    x, wg, wu, wd, tw, ti = _moe_inputs(E=4)
    ti = ti % 3  # expert 3: no token
    wg[3] = float("inf")
    leaves = [t.clone().requires_grad_() for t in (x, wg, wu, wd, tw)]
    ours = torch.autograd.grad(ops.moe(*leaves, ti).sum(), leaves)
    leaves = [t.clone().requires_grad_() for t in (x, wg, wu, wd, tw)]
    theirs = torch.autograd.grad(_moe_loop(*leaves, ti).sum(), leaves, allow_unused=True)
    for a, b in zip(ours, theirs):
        assert torch.isfinite(a).all()
        _close(a, torch.zeros_like(a) if b is None else b)
    assert not ours[1][3].any()  # the unused expert's weights: no gradient


def test_moe_builds_once_whatever_the_routing():
    """Segments of any length run the same expert module: a new routing (here every
    token's first expert is 0, and expert 3 gets none) builds nothing new."""
    x, wg, wu, wd, tw, ti = _moe_inputs()
    ops.moe(x, wg, wu, wd, tw, ti)
    n = len(autotune.torch_call.MODULES)
    ti = ti.clone()
    ti[:, 0] = 0
    ti[:, 1] = torch.where(ti[:, 1] == 0, 1, ti[:, 1]).clamp(max=2)
    _close(ops.moe(x, wg, wu, wd, tw, ti), _moe_loop(x, wg, wu, wd, tw, ti))
    assert len(autotune.torch_call.MODULES) == n


def test_non_contiguous_input_is_copied():
    _seed()
    x = torch.randn(37, 6).T  # non-contiguous view
    _close(ops.softmax(x, -1), torch.softmax(x, -1))
    _close(ops.gelu(x), F.gelu(x))


@pytest.mark.parametrize("dim", [-1, 0])
def test_softmax_of_a_0d_tensor_is_one_as_torch(dim):
    x = torch.tensor(0.7, dtype=torch.float64, requires_grad=True)
    y = ops.softmax(x, dim)
    _close(y, torch.softmax(x, dim))
    assert torch.autograd.gradcheck(lambda t: ops.softmax(t, dim), (x,))
    with pytest.raises(IndexError, match="softmax: dim 1 is out of range for a 0-d tensor"):
        ops.softmax(x, 1)


def test_layer_norm_of_rows_near_a_large_mean_is_as_accurate_as_torch():
    """The mean is summed from the row shifted by its first element: a constant row
    gives exactly the bias, and rows near 1000 lose no more than PyTorch's Welford."""
    x = torch.full((3, 1000), 1000.1)
    w, b = torch.ones(1000), torch.linspace(-1, 1, 1000)
    assert torch.equal(ops.layer_norm(x, w, b, 1e-5), b.expand(3, 1000))
    x = torch.randn(8, 4096) * 0.1 + 100
    ref = F.layer_norm(x.double(), (4096,), eps=1e-5)
    ours = (ops.layer_norm(x, torch.ones(4096), torch.zeros(4096), 1e-5).double() - ref).abs()
    theirs = (F.layer_norm(x, (4096,), eps=1e-5).double() - ref).abs()
    assert ours.max() <= 2 * theirs.max()


def test_bad_inputs_are_refused_by_name():
    x = torch.randn(4, 8)
    with pytest.raises(TypeError, match=r"gelu: x: dtype torch.int32 is not supported"):
        ops.gelu(x.to(torch.int32))
    with pytest.raises(ValueError, match=r"rms_norm: weight: shape \(7,\), expected \(8,\)"):
        ops.rms_norm(x, torch.ones(7), 1e-6)
    q = torch.randn(1, 2, 8, 4)
    with pytest.raises(ValueError, match=r"attention: k has shape \(1, 2, 8, 5\)"):
        ops.attention(q, torch.randn(1, 2, 8, 5), q, False, None)
    with pytest.raises(ValueError, match=r"attention: v has shape \(1, 2, 9, 4\), q has"):
        ops.attention(q, q, torch.randn(1, 2, 9, 4), False, None)
    args = list(_moe_inputs())
    args[5] = args[5] + 4  # expert ids out of range
    with pytest.raises(ValueError, match=r"topk_ids must lie in \[0, 4\)"):
        ops.moe(*args)
    args[5] = -args[5]  # negative ids
    with pytest.raises(ValueError, match=r"topk_ids must lie in \[0, 4\), got -"):
        ops.moe(*args)
    args = list(_moe_inputs(E=2, k=2))
    args[4], args[5] = args[4].repeat(1, 2), args[5].repeat(1, 2)  # k = 4 of 2 experts
    too_many = r"moe: topk_ids picks 4 experts per token, but there are 2"
    with pytest.raises(ValueError, match=too_many):
        ops.moe(*args)
    # a gradient of another shape is refused, even with as many elements
    x, w = torch.randn(4, 16), torch.ones(16)
    for dy in (torch.randn(16, 4), torch.randn(4, 15)):
        shape = re.escape(str(tuple(dy.shape)))
        with pytest.raises(ValueError, match=rf"gelu_backward: dy: shape {shape} differs "
                                             r"from x's \(4, 16\)"):  # fmt: skip
            ops.gelu_backward(x, dy, "none")
        with pytest.raises(ValueError, match=rf"rms_norm_backward: dy: shape {shape}"):
            ops.rms_norm_backward(x, w, dy, 1e-6)
        with pytest.raises(ValueError, match=rf"layer_norm_backward: dy: shape {shape}"):
            ops.layer_norm_backward(x, w, dy, 1e-5)
        with pytest.raises(ValueError, match=rf"softmax_backward: dy: shape {shape} differs "
                                             r"from y's \(4, 16\)"):  # fmt: skip
            ops.softmax_backward(x, dy, -1)


def test_more_bad_inputs_are_refused_by_name():
    x, w = torch.randn(4, 8), torch.ones(8)
    # an argument on meta sends the call to the fake kernel: it used to return an
    # uninitialized CPU tensor
    for call, name in (
        (lambda: ops.layer_norm(x, w.to("meta"), torch.zeros(8), 1e-5), "layer_norm"),
        (lambda: ops.rms_norm(x.to("meta"), w, 1e-6), "rms_norm"),
        (
            lambda: ops.moe(*[a.to("meta") if k == 1 else a for k, a in enumerate(_moe_inputs())]),
            "moe",
        ),  # fmt: skip
    ):
        with pytest.raises(ValueError, match=rf"pypto::{name}: the tensors are on different "
                                             r"devices \(.*on meta"):  # fmt: skip
            call()
    assert ops.gelu(x.to("meta")).device.type == "meta"  # all on meta: shape inference
    with pytest.raises(TypeError, match=r"gelu: x: a torch.sparse_coo tensor; pypto takes dense"):
        ops.gelu(x.to_sparse())
    with pytest.raises(ValueError, match=r"rms_norm_backward: weight: shape \(3,\), expected"):
        ops.rms_norm_backward(x, torch.ones(3), x, 1e-6)
    with pytest.raises(ValueError, match=r"layer_norm_backward: weight: shape \(3,\)"):
        ops.layer_norm_backward(x, torch.ones(3), x, 1e-5)
    with pytest.raises(TypeError, match=r"gelu_backward: dy: dtype torch.float64 differs from "
                                        r"x's torch.float32"):  # fmt: skip
        ops.gelu_backward(x, x.double(), "none")
    with pytest.raises(ValueError, match="rms_norm: x is 0-d; it needs a last dimension"):
        ops.rms_norm(torch.tensor(2.0), torch.ones(1), 1e-6)
    with pytest.raises(ValueError, match="layer_norm: x is 0-d"):
        ops.layer_norm(torch.tensor(2.0), torch.ones(1), torch.zeros(1), 1e-5)
    args = list(_moe_inputs())
    args[1:4] = [a[:0] for a in args[1:4]]
    with pytest.raises(ValueError, match=r"moe: w_gate has no experts \(E = 0\)"):
        ops.moe(*args)


def test_module_is_built_once_per_shape():
    cache = autotune.torch_call.MODULES
    n = len(cache)
    ops.gelu(torch.randn(6, 10))
    ops.gelu(torch.randn(6, 10))  # same shape: the cached module
    assert len(cache) == n + 1
    ops.gelu(torch.randn(7, 10))  # a new shape: one more module
    assert len(cache) == n + 2
    assert autotune.torch.module("gelu", (6, 10, "none")) is autotune.torch.module(
        "gelu", (6, 10, "none")
    )


def test_torch_compile_fullgraph():
    _seed()
    x = torch.randn(4, 32, requires_grad=True)
    w = torch.randn(32, requires_grad=True)
    q, k, v = (torch.randn(1, 2, 12, 8) for _ in range(3))

    def f(x, w, q, k, v):
        h = ops.rms_norm(ops.gelu(x), w, 1e-6)
        return ops.softmax(h, -1), ops.attention(q, k, v, True, None)

    def ref(x, w, q, k, v):
        h = _rms(F.gelu(x), w, 1e-6)
        return torch.softmax(h, -1), F.scaled_dot_product_attention(q, k, v, is_causal=True)

    compiled = torch.compile(f, fullgraph=True)  # Inductor: no graph break around the ops
    y, o = compiled(x, w, q, k, v)
    y2, o2 = ref(x, w, q, k, v)
    _close(y, y2)
    _close(o, o2)
    dy = torch.randn_like(y)
    g = torch.autograd.grad(y, (x, w), dy)
    g2 = torch.autograd.grad(y2, (x, w), dy)
    for a, c in zip(g, g2):
        _close(a, c, 1e-4)


def test_user_custom_op():
    def build(shape):
        X = pt.placeholder(shape, "float32", name="X")
        Y = pt.compute(shape, lambda i, j: X[i, j] * X[i, j] + pt.const(1.0, "float32"), name="Y")
        s = pt.create_schedule(Y.op)
        s[Y].parallel(Y.op.axis[0])
        return s, [X, Y]

    op = ptt.custom_op("pypto_test::sq1", build, n_inputs=1)
    x = torch.randn(5, 7)
    _close(op(x), x * x + 1)
    _close(torch.ops.pypto_test.sq1(x), x * x + 1)
    compiled = torch.compile(lambda t: op(t) * 2, fullgraph=True, backend="aot_eager")
    _close(compiled(x), (x * x + 1) * 2)
    with pytest.raises(TypeError, match=r"pypto_test::sq1 input 0: dtype float64"):
        op(x.double())
    for bad in ("sq2", "a::b::c", "lib::\u00fc", "lib::"):
        with pytest.raises(ValueError, match=r"name must be 'namespace::op', each an identifier"):
            ptt.custom_op(bad, build, n_inputs=1)
    for taken in ("pypto_test::sq1", "pypto::gelu"):  # PyTorch would replace them silently
        with pytest.raises(ValueError, match=f"{taken} is already a PyTorch operator"):
            ptt.custom_op(taken, build, n_inputs=1)
    _close(torch.ops.pypto.gelu(x), torch.nn.functional.gelu(x))
    with pytest.raises(ValueError, match=r"the namespace 'aten' is PyTorch's own"):
        ptt.custom_op("aten::sq1_pypto", build, n_inputs=1)
    for what, kw in (
        ("n_inputs", {"n_inputs": -1}),
        ("n_outputs", {"n_inputs": 1, "n_outputs": 0}),
    ):
        with pytest.raises(ValueError, match=f"custom_op: {what} must be an integer of at least"):
            ptt.custom_op("pypto_test::never", build, **kw)


def test_user_custom_op_input_of_another_rank_is_named():
    def build(a_shape, b_shape):
        n, m = pt.var("n"), pt.var("m")
        A = pt.placeholder((n, m), "float32", name="A")
        B = pt.placeholder((n, m), "float32", name="B")
        C = pt.compute((n, m), lambda i, j: A[i, j] + B[i, j], name="C")
        return pt.create_schedule(C.op), [A, B, C]

    add = ptt.custom_op("pypto_test::add2d", build, n_inputs=2)
    a = torch.randn(3, 4)
    _close(add(a, a), 2 * a)
    with pytest.raises(ValueError, match=r"pypto_test::add2d input 0: 1-D, the kernel takes 2-D"):
        add(torch.randn(7), torch.randn(7))
    mixed = r"pypto_test::add2d: the tensors are on different devices \(input 0 on cpu, input 1"
    with pytest.raises(ValueError, match=mixed):
        add(a, a.to("meta"))


def test_user_custom_op_recompiles_for_new_shapes_and_takes_8_bit_dtypes():
    def build(*shapes):
        ((m, n),) = shapes
        X = pt.placeholder((m, n), "uint8", name="X")
        Y = pt.compute((m, n), lambda i, j: pt.cast("int32", X[i, j]) * 3, name="Y")
        Z = pt.compute((m, n), lambda i, j: pt.cast("int8", X[i, j] // 2), name="Z")
        return pt.create_schedule([Y.op, Z.op]), [X, Y, Z]

    op = ptt.custom_op("pypto_test::u8_triple", build, n_inputs=1, n_outputs=2)
    for dynamic in (False, True):
        f = torch.compile(lambda a: op(a), fullgraph=True, dynamic=dynamic)
        for shape in [(4, 8), (5, 8), (3, 2)]:
            x = torch.randint(0, 256, shape, dtype=torch.uint8)
            y, z = f(x)
            assert torch.equal(y, x.to(torch.int32) * 3) and z.dtype == torch.int8
            assert torch.equal(z, (x // 2).to(torch.int8))


def test_user_custom_op_with_sizes_bound_by_its_inputs():
    """A kernel over ``pt.var`` sizes: the outputs' shapes come from the inputs' (also
    in the fake kernel); an output size that no input binds is refused by name."""

    def build(*shapes):
        n, m = pt.var("n"), pt.var("m")
        X = pt.placeholder((n, m), "float32", name="X")
        Y = pt.compute((m, n), lambda j, i: X[i, j] * 2.0, name="Y")  # the transpose
        return pt.create_schedule(Y.op), [X, Y]

    op = ptt.custom_op("pypto_test::t2", build, n_inputs=1)
    for shape in ((3, 5), (6, 2)):
        x = torch.randn(*shape)
        _close(op(x), x.T * 2)
    compiled = torch.compile(lambda t: op(t) + 1, fullgraph=True, backend="aot_eager")
    x = torch.randn(4, 7)
    _close(compiled(x), x.T * 2 + 1)

    def unbound(shape):
        k = pt.var("k")
        X = pt.placeholder((4,), "float32", name="X")
        Y = pt.compute((k,), lambda i: X[0] + pt.cast("float32", i), name="Y")
        return pt.create_schedule(Y.op), [X, Y]

    op = ptt.custom_op("pypto_test::unbound", unbound, n_inputs=1)
    with pytest.raises(ValueError, match=r"the shape of output Y depends on k, which no input"):
        op(torch.randn(4))


def test_transformer_block_example_agrees():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cmd = [sys.executable, "examples/transformer_block.py", "--seq", "24", "--dim", "32"]
    cmd += ["--ff", "48", "--heads", "4", "--kv-heads", "2", "--experts", "4", "--repeat", "1"]
    cmd += ["--no-compile"]  # grouped-query attention: 2 query heads per key/value head
    env = {**os.environ, "PYTHONPATH": root}
    out = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    rows = {ln.split()[0]: ln.split() for ln in out.stdout.splitlines()[2:]}
    assert set(rows) == {"eager", "pypto"}
    assert float(rows["pypto"][-1]) < 1e-4  # max |diff| against eager PyTorch


def test_operator_uses_the_best_record_for_its_shape(tmp_path):
    args = (9, 70, "none")
    target = pt.Target("host")
    task = at.Task("gelu", args, target=target)
    default = task.config_space.default_config()
    other = {"tile_j": [-1, target.vector_lanes("float32")], "unroll_j": 1}
    assert other != {k: default[k].val for k in other}  # a config the default is not
    rec = at.Record(at.workload_key("gelu", args), target.key, other, costs=[1e-6])
    log = str(tmp_path / "gelu.jsonl")
    at.append_records(log, [rec])
    with at.apply_history_best(log):
        mod = autotune.torch.module("gelu", args)
    s, tensors = task.instantiate(task.config_space.config(other))
    assert mod.source == pt.build(s, tensors, target=target, name="gelu").source
    x = torch.randn(9, 70)
    _close(ops.gelu(x), F.gelu(x))


def test_records_in_scope_apply_to_a_shape_already_run(tmp_path):
    """A shape run first with the default config, then under apply_history_best with a
    record of another config: the second call runs the record's config."""
    args = (11, 70, "none")
    target = pt.Target("host")
    task = at.Task("gelu", args, target=target)
    other = {"tile_j": [-1, target.vector_lanes("float32")], "unroll_j": 1}
    x = torch.randn(11, 70)
    _close(ops.gelu(x), F.gelu(x))
    before = autotune.torch.module("gelu", args)
    log = str(tmp_path / "gelu.jsonl")
    at.append_records(log, [at.Record(task.workload_key, target.key, other, costs=[1e-6])])
    with at.apply_history_best(log):
        _close(ops.gelu(x), F.gelu(x))
        mod = autotune.torch.module("gelu", args)
    want = pt.build(*task.instantiate(task.config_space.config(other)), target=target, name="gelu")
    assert mod.source == want.source != before.source
    assert autotune.torch.module("gelu", args) is before  # out of the scope: as before


def test_operator_reads_the_users_records_without_being_told(tmp_path, monkeypatch):
    """What ``pypto-tune`` wrote to the user's store is used by the operators (as
    ``apply_history_best()`` reads it: the user's logs, then the shipped ones)."""
    monkeypatch.setenv("PYPTO_HOME", str(tmp_path))  # the cache directory included
    args = (13, 70, "none")
    target = pt.Target("host")
    task = at.Task("gelu", args, target=target)
    default = task.config_space.default_config()
    other = {"tile_j": [-1, target.vector_lanes("float32")], "unroll_j": 1}
    assert other != {k: default[k].val for k in other}
    rec = at.Record(at.workload_key("gelu", args), target.key, other, costs=[1e-6])
    at.append_records(at.store.user_log("gelu"), [rec])
    mod = autotune.torch.module("gelu", args)
    s, tensors = task.instantiate(task.config_space.config(other))
    assert mod.source == pt.build(s, tensors, target=target, name="gelu").source


def _two_outputs(*shapes):
    n = pt.var("n")
    A = pt.placeholder((n,), "float32", name="A")
    Y = pt.compute((n,), lambda i: A[i] * 2.0, name="Y")
    Z = pt.compute((n,), lambda i: A[i] + 1.0, name="Z")
    return pt.create_schedule([Y.op, Z.op]), [A, Y, Z]


@pytest.mark.parametrize(
    "n_inputs, n_outputs, message",
    [(2, 1, r"tensor 1 \(Y\) is a computed tensor, but with n_inputs=2 it is input 1"),
     (0, 3, r"tensor 0 \(A\) is a placeholder, but with n_inputs=0 it is output 0")],
)  # fmt: skip
def test_user_custom_op_whose_counts_disagree_with_its_build_is_refused(
    n_inputs, n_outputs, message
):
    """One input too many had the kernel write the caller's second tensor; one too few
    returned a buffer nothing wrote."""
    op = ptt.custom_op(
        f"pypto_test::miscount{n_inputs}", _two_outputs, n_inputs=n_inputs, n_outputs=n_outputs
    )
    a, b = torch.arange(4.0), torch.full((4,), 7.0)
    with pytest.raises(ValueError, match=message):
        op(*(a, b)[:n_inputs])
    assert b.tolist() == [7.0] * 4


def test_row_operators_return_tensors_that_change_in_place_under_autograd():
    """They returned views of the kernel's (rows, cols) buffer: h = norm(x); h += r
    raised where F.rms_norm's works."""
    F = torch.nn.functional
    x = torch.randn(2, 3, 8, dtype=torch.float64, requires_grad=True)
    w = torch.randn(8, dtype=torch.float64, requires_grad=True)
    b = torch.randn(8, dtype=torch.float64, requires_grad=True)
    ours_theirs = [
        (lambda: torch.ops.pypto.gelu(x), lambda: F.gelu(x)),
        (lambda: torch.ops.pypto.rms_norm(x, w, 1e-6), lambda: F.rms_norm(x, (8,), w, 1e-6)),
        (lambda: torch.ops.pypto.layer_norm(x, w, b, 1e-5), lambda: F.layer_norm(x, (8,), w, b)),
    ]
    for ours, theirs in ours_theirs:
        grads = []
        for f in (ours, theirs):
            h = f()
            h += 1.0
            h.mul_(2.0)
            (h * torch.arange(8.0, dtype=torch.float64)).sum().backward()
            grads.append(x.grad.clone())
            x.grad = None
        torch.testing.assert_close(grads[0], grads[1])
    assert torch.ops.pypto.softmax(x, 1)._base is None


@pytest.mark.parametrize("case", ["plain", "causal", "gqa", "mask"])
def test_attention_backward_is_autograd_of_its_definition(case):
    """Recomputed with PyTorch from the saved inputs: checked in float64, and against
    SDPA's own gradients where SDPA defines the same thing."""
    torch.manual_seed(0)
    F = torch.nn.functional
    H, Hk = (4, 2) if case == "gqa" else (2, 2)
    q = torch.randn(1, H, 5, 4, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, Hk, 6, 4, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, Hk, 6, 3, dtype=torch.float64, requires_grad=True)
    kw = {"is_causal": case == "causal", "enable_gqa": case == "gqa"}
    if case == "mask":
        kw["attn_mask"] = torch.rand(5, 6) > 0.3
        kw["attn_mask"][:, 0] = True  # (SDPA gives NaN for a query with no key)
    assert torch.autograd.gradcheck(lambda *t: torch.ops.pypto.attention(*t, **kw), (q, k, v))
    ours = torch.autograd.grad(torch.ops.pypto.attention(q, k, v, **kw).sum(), (q, k, v))
    theirs = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, **kw).sum(), (q, k, v))
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b)


def test_moe_backward_is_autograd_of_its_definition():
    torch.manual_seed(0)
    T, d, f, E = 6, 4, 5, 3
    x = torch.randn(T, d, dtype=torch.float64, requires_grad=True)
    wg, wu = (torch.randn(E, f, d, dtype=torch.float64, requires_grad=True) for _ in range(2))
    wd = torch.randn(E, d, f, dtype=torch.float64, requires_grad=True)
    tw = torch.rand(T, 2, dtype=torch.float64, requires_grad=True)
    ti = torch.tensor([[0, 1], [2, 2], [1, 0], [0, 2], [1, 1], [2, 0]])
    assert torch.autograd.gradcheck(
        lambda *t: torch.ops.pypto.moe(*t, ti), (x, wg, wu, wd, tw), atol=1e-6
    )
    out = torch.ops.pypto.moe(x, wg, wu, wd, tw, ti)
    ours = torch.autograd.grad(out.sum(), (x, wg, tw))
    theirs = torch.autograd.grad(_moe_loop(x, wg, wu, wd, tw, ti).sum(), (x, wg, tw))
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b)


def test_compiled_attention_of_parameters_that_require_grad():
    """torch.compile traces the joint graph when an input requires grad (a module's
    parameters do): it failed for want of a backward, forward-only calls too."""
    torch.manual_seed(0)
    proj = torch.nn.Linear(8, 8)

    def f(x):
        q = proj(x).view(1, 5, 2, 4).transpose(1, 2)
        return torch.ops.pypto.attention(q, q, q, True)

    x = torch.randn(1, 5, 8)
    compiled = torch.compile(f, fullgraph=True)
    torch.testing.assert_close(compiled(x), f(x))
    compiled(x).sum().backward()
    got = proj.weight.grad.clone()
    proj.weight.grad = None
    F = torch.nn.functional
    q = proj(x).view(1, 5, 2, 4).transpose(1, 2)
    F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
    torch.testing.assert_close(got, proj.weight.grad)


def test_moe_weights_are_packed_once_for_many_layers_and_for_views(monkeypatch):
    """The cache was cleared whole at 16 weights (six MoE layers packed every weight on
    every call), and a view (W[0]) was packed again at each call."""
    import autotune.torch_moe as tm

    packs = []
    real = tm.pack_panels
    monkeypatch.setattr(tm, "pack_panels", lambda *a, **k: packs.append(1) or real(*a, **k))
    E, d, f, T = 4, 16, 32, 8
    layers = [[torch.randn(E, f, d), torch.randn(E, f, d), torch.randn(E, d, f)] for _ in range(6)]
    x, ti, tw = torch.randn(T, d), torch.randint(0, E, (T, 2)), torch.rand(T, 2)
    for _ in range(3):
        for L in layers:
            torch.ops.pypto.moe(x, *L, tw, ti)
    assert len(packs) == 18
    W, wd = torch.randn(2, E, f, d), torch.randn(E, d, f)
    for _ in range(3):
        out = torch.ops.pypto.moe(x, W[0], W[1], wd, tw, ti)
    assert len(packs) == 18 + 3
    torch.testing.assert_close(out, _moe_loop(x, W[0], W[1], wd, tw, ti), rtol=1e-4, atol=1e-4)


def _square(shape):
    X = pt.placeholder(shape, "float32", name="X")
    Y = pt.compute(shape, lambda i, j: X[i, j] * X[i, j], name="Y")
    return pt.create_schedule(Y.op), [X, Y]


def test_forward_mode_ad_without_a_rule_is_refused_not_zero():
    """A custom_op with no jvp rule (PyTorch gives custom operators none): inside
    torch.func.jvp, jacfwd and forward_ad its tangents would be zero; the call is
    refused instead, works again outside, and reverse mode is the derivative. With
    register_autograd but no jvp, refused by the operator's name."""
    import torch.autograd.forward_ad as fwAD

    _seed()
    x = torch.randn(3, 37)
    plain = ptt.custom_op("pypto_test::fwd_sq", _square, n_inputs=1)
    ruled = ptt.custom_op("pypto_test::fwd_sq_rev", _square, n_inputs=1)
    ptt.register_autograd(ruled, lambda ctx, dy: dy, setup_context=lambda ctx, inputs, output: None)
    for f, refused in (
        (plain, r"no forward-mode derivative .*differentiate in reverse mode"),
        (ruled, r"pypto_test::fwd_sq_rev has no forward-mode derivative"),
    ):
        t = torch.randn_like(x)
        with pytest.raises(NotImplementedError, match=refused):
            torch.func.jvp(f, (x,), (t,))
        with pytest.raises(NotImplementedError, match=refused):
            torch.func.jacfwd(f)(x)
        with fwAD.dual_level(), pytest.raises(NotImplementedError, match=refused):
            f(fwAD.make_dual(x, t))
        _close(f(x), x * x)  # outside: runs
    x = torch.randn(2, 6)
    want = torch.autograd.functional.jacobian(F.gelu, x)
    _close(torch.autograd.functional.jacobian(ops.gelu, x), want, 1e-5)


def test_a_shape_generic_custom_op_builds_once_and_compiles_once():
    """``build()`` without parameters: one module for every shape, and under
    torch.compile(dynamic=True) or mark_dynamic one graph (its sizes stay symbolic)."""
    from torch._dynamo.testing import CompileCounter

    builds = []

    def build():
        builds.append(1)
        n, m = pt.var("n"), pt.var("m")
        X = pt.placeholder((n, m), "float32", name="X")
        Y = pt.compute((m, 2 * n), lambda j, i: X[i // 2, j] * 3.0, name="Y")
        return pt.create_schedule(Y.op), [X, Y]

    op = ptt.custom_op("pypto_test::generic_t", build, n_inputs=1)
    want = lambda x: x.T.repeat_interleave(2, dim=1) * 3 + 1  # noqa: E731
    for dynamic in (True, None):
        torch._dynamo.reset()
        count = CompileCounter()
        f = torch.compile(lambda t: op(t) + 1, fullgraph=True, backend=count, dynamic=dynamic)
        for shape in ((3, 5), (6, 2), (4, 7), (9, 3)):
            x = torch.randn(*shape)
            if dynamic is None:
                torch._dynamo.mark_dynamic(x, 0)
                torch._dynamo.mark_dynamic(x, 1)
            _close(f(x), want(x))
        assert count.frame_count == 1, (dynamic, count.frame_count)
    _close(op(x), want(x) - 1)  # eager, the same module
    assert len(builds) == 1
    with pytest.raises(TypeError, match=r"pypto_test::generic_t input 0: dtype float64"):
        op(x.double())


def test_repeated_calls_pass_pointers_and_keep_every_check(monkeypatch):
    """After a call of some shapes and dtypes, a call of plain tensors of the same ones
    skips the module's Python checks (the tensors' pointers go straight to the kernel);
    run-time index checks still raise, and a tensor that is not plain (strided, a lazy
    negation) or of new shapes takes the checked path."""

    def build():
        n = pt.var("n")
        X = pt.placeholder((n,), "float32", name="X")
        idx = pt.placeholder((n,), "int32", name="I")
        Y = pt.compute((n,), lambda i: X[idx[i]] * 2.0, name="Y")
        return pt.create_schedule(Y.op), [X, idx, Y]

    op = ptt.custom_op("pypto_test::gather_twice", build, n_inputs=2)
    x, idx = torch.randn(6), torch.tensor([5, 0, 1, 2, 3, 4], dtype=torch.int32)
    _close(op(x, idx), x[idx.long()] * 2)
    checked = []
    call = pt.Module.__call__
    monkeypatch.setattr(pt.Module, "__call__", lambda m, *a: checked.append(1) or call(m, *a))
    x2 = torch.randn(6)
    _close(op(x2, idx), x2[idx.long()] * 2)
    assert not checked  # the pointer path
    with pytest.raises(IndexError, match=r"out of range; the outputs are incomplete"):
        op(x2, torch.tensor([0, 1, 2, 3, 4, 6], dtype=torch.int32))
    strided = torch.randn(12)[::2]
    _close(op(strided, idx), strided[idx.long()] * 2)
    assert checked == [1]  # copied, through the checks
    _close(op(torch._neg_view(x2), idx), -x2[idx.long()] * 2)  # its values, not its bits
    y, i9 = torch.randn(9), torch.arange(8, -1, -1, dtype=torch.int32)
    _close(op(y, i9), y.flip(0) * 2)  # new shapes: through the checks
    assert len(checked) >= 2


@pytest.mark.parametrize("bdim", [0, 1])
def test_vmap_of_the_row_operators_uses_their_batching_rules(bdim):
    """With PyTorch's per-element fallback turned off, vmap over gelu, rms_norm,
    layer_norm and softmax (any dim) runs, batched at either dimension, weights batched
    or not, and agrees with vmap of PyTorch's own; a batch of 0-d tensors too."""
    fallback = torch._C._functorch._set_vmap_fallback_enabled
    fallback(False)
    try:
        _seed()
        x, w, b, wb = torch.randn(3, 4, 16), torch.randn(16), torch.randn(16), torch.randn(4, 16)
        vm = torch.func.vmap
        for ours, theirs in CASES.values():
            one, two = (lambda t, f=f: f(t, w, b) for f in (ours, theirs))
            _close(vm(one, in_dims=bdim)(x), vm(two, in_dims=bdim)(x))
        batched = (1, 0, None) if bdim == 1 else (1, 0, 0)
        bb = b if bdim == 1 else torch.randn(4, 16)
        for name in ("rms_norm", "layer_norm"):
            ours, theirs = CASES[name]
            _close(
                vm(ours, in_dims=batched)(x, wb, bb), vm(theirs, in_dims=batched)(x, wb, bb), 1e-5
            )
        _close(vm(lambda t: ops.softmax(t, -1))(torch.randn(5)), torch.ones(5))
        with pytest.raises(ValueError, match=r"rms_norm: x is 0-d"):
            vm(ops.rms_norm, in_dims=(0, 0))(torch.randn(4), torch.randn(4, 1))
        with pytest.raises(TypeError, match=r"layer_norm: dtype torch.float64 differs"):
            vm(ops.layer_norm, in_dims=(1, 0, None))(x, wb.double(), b)
        with pytest.raises(ValueError, match=r"rms_norm: a vector of shape \(4, 15\)"):
            vm(ops.rms_norm, in_dims=(1, 0))(x, torch.randn(4, 15))
        # weights batched at their last dim (was refused: their length read as the batch's)
        wt, bt = torch.randn(16, x.shape[bdim]), torch.randn(16, x.shape[bdim])
        for name, extra in (("rms_norm", ()), ("layer_norm", (bt,))):
            ours, theirs = CASES[name]
            dims = (bdim, 1) + (1,) * len(extra)
            f, g = (lambda xx, ww, *bb, h=h: h(xx, ww, *(bb or (b,))) for h in (ours, theirs))
            _close(vm(f, in_dims=dims)(x, wt, *extra), vm(g, in_dims=dims)(x, wt, *extra), 1e-5)
        # a dim out of the element's range: eager's IndexError (was: another axis, quietly)
        for d in (2, -3, 7):
            with pytest.raises(IndexError, match=f"softmax: dim {d} is out of range for a 2-d"):
                vm(lambda t, d=d: ops.softmax(t, d))(torch.randn(3, 4, 5))
        sq = ptt.custom_op(f"pypto_test::vmap_sq{bdim}", _square, n_inputs=1)  # no vmap rule
        with pytest.raises(RuntimeError, match=r"vmap_sq\d hit the vmap fallback"):  # real
            vm(sq)(torch.randn(2, 3, 4))
    finally:
        fallback(True)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda x, w: ops.rms_norm(x, w, float("nan")), "rms_norm: eps must be a finite number"),
        (lambda x, w: ops.layer_norm(x, w, w, float("inf")), "layer_norm: eps must be a finite"),
        (
            lambda x, w: ops.attention(x[None, None], x[None, None], x[None, None], False, NAN),
            "attention: scale must be a finite number, got nan",
        ),
    ],
)
def test_a_value_that_is_not_finite_is_refused_by_name(call, message):
    """Was: "workload arguments must be finite numbers, got nan", naming neither."""
    x, w = torch.randn(4, 8), torch.ones(8)
    with pytest.raises(ValueError, match=re.escape(message)):
        call(x, w)


def test_a_custom_op_whose_build_returns_no_schedule_is_refused_by_name():
    """Was: "cannot unpack non-iterable NoneType object" from inside."""
    for i, bad in enumerate((None, (None, [1, 2]), 7)):
        op = ptt.custom_op(f"pypto_test::bad_build{i}", lambda shape, bad=bad: bad, n_inputs=1)
        with pytest.raises(TypeError, match=rf"bad_build{i}: build must return \(schedule, \["):
            op(torch.ones(3))


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda x, w: ops.layer_norm(x, w, None, 1e-5), "layer_norm: bias is None; pass torch.z"),
        (lambda x, w: ops.rms_norm(x, None), "rms_norm: weight is None; pass torch.ones(8)"),
        (lambda x, w: ops.gelu(None), "gelu: x: expected a torch.Tensor, got None"),
        (lambda x, w: ops.softmax_backward(x, None, -1), "softmax_backward: dy: expected a torch"),
        (lambda x, w: ops.attention(x[None, None], x[None, None], None), "attention: v: expected"),
        (lambda x, w: ops.moe(x, None, None, None, None, None), "moe: w_gate: expected a torch"),
    ],
)
def test_none_for_a_tensor_is_refused_by_name(call, message):
    """Was: AttributeError ('NoneType' object has no attribute 'shape') from inside."""
    x, w = torch.randn(4, 8), torch.randn(8)
    with pytest.raises(TypeError, match=re.escape(message)):
        call(x, w)
