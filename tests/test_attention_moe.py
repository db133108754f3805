"""New templates against their float64 numpy references: gelu, attention, moe, and
the row-wise forwards/backwards in float32 and float64, at small (non-divisible) shapes."""

import math
import re

import numpy as np
import pytest

import autotune as at
import pypto as pt
from autotune.templates import norm_grad as ng
from autotune.templates.attention import _attention_ref
from autotune.templates.gelu import gelu_grad_ref, gelu_ref
from autotune.templates.moe import (
    _expert_ref,
    combine,
    dot_kernel,
    expert_ffn,
    moe_route,
    nominal_rows,
    pack_panels,
    panel_width,
    routed_rows,
)
from pypto.dtypes import numpy_dtype

RNG = np.random.default_rng(3)


def _ref(args, *inputs):
    """The attention template's float64 reference for these template arguments."""
    return at.get_template("attention").reference_output(inputs, args)[0]


def _run(name, args, *inputs):
    s, tensors = at.get_template(name)(*args)
    mod = pt.build(s, tensors)
    outs = [
        np.full([int(d.value) for d in t.shape], np.nan, numpy_dtype(t.dtype))
        for t in tensors[len(inputs) :]
    ]
    mod(*inputs, *outs)
    return outs


# 16-bit floats: computed in float32 and rounded once, as the references round theirs
# (one rounding each: at most one unit of the last place apart, 2^-8 and 2^-11)
SIXTEEN = [("bfloat16", 1e-2), ("float16", 2e-3)]


def _close16(got, ref, tol, rtol=None):
    np.testing.assert_allclose(
        got.astype(np.float64), ref.astype(np.float64), atol=tol, rtol=tol if rtol is None else rtol
    )


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype,tol", [("float32", 3e-6), ("float64", 1e-13), *SIXTEEN])
def test_gelu_forward_backward(approximate, dtype, tol):
    nd = numpy_dtype(dtype)
    x = (RNG.standard_normal((7, 45)) * 3).astype(nd)
    dy = RNG.standard_normal((7, 45)).astype(nd)
    rtol = tol if dtype in ("bfloat16", "float16") else 0
    (y,) = _run("gelu", (7, 45, approximate, dtype), x)
    assert y.dtype == nd
    _close16(y, gelu_ref(x, approximate), tol, rtol)
    (dx,) = _run("gelu_backward", (7, 45, approximate, dtype), x, dy)
    _close16(dx, gelu_grad_ref(x, dy, approximate), 5 * tol, rtol)


def test_gelu_refuses_unknown_approximation():
    with pytest.raises(ValueError, match="approximate must be 'none' or 'tanh', got 'fast'"):
        at.get_template("gelu")(4, 4, "fast")


@pytest.mark.parametrize(
    "B,H,S,D,causal,scale",
    [(1, 2, 37, 16, False, None), (2, 1, 45, 20, True, 0.3), (1, 1, 5, 3, True, None)],
)
def test_attention_matches_reference(B, H, S, D, causal, scale):
    q, k, v = (RNG.standard_normal((B, H, S, D)).astype("float32") for _ in range(3))
    (o,) = _run("attention", (B, H, S, D, causal, scale), q, k, v)
    ref = _attention_ref(q, k, v, causal=causal, scale=scale)
    np.testing.assert_allclose(o, ref, atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("S,kv_len,causal", [(13, 40, True), (9, 33, False)])
def test_attention_with_more_keys_than_queries(S, kv_len, causal):
    args = (2, 1, S, 20, causal, None, "float32", kv_len)
    q = RNG.standard_normal((2, 1, S, 20)).astype("float32")
    k, v = (RNG.standard_normal((2, 1, kv_len, 20)).astype("float32") for _ in range(2))
    (o,) = _run("attention", args, q, k, v)
    ref = _attention_ref(q, k, v, causal=causal, scale=None)
    np.testing.assert_allclose(o, ref, atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("form", ["two_pass", "flash"])
@pytest.mark.parametrize(
    "args",
    [
        (1, 2, 21, 12, False, None, "float32", None, None, False, 40),  # wider values
        (2, 1, 19, 24, True, 0.2, "float32", 30, None, False, 5),  # narrower, causal
        (1, 1, 9, 16, True, None, "float64", None, None, False, 7),
    ],
)
def test_attention_value_dim_differs_from_key_dim(args, form):
    """``dv``: V ``[B, H, S_kv, dv]`` and O ``[B, H, S, dv]`` (as SDPA's ``Ev``), the
    scale still from D."""
    task = at.Task("attention", args)
    cfg = dict(task.config_space.default_config().values, form=form)
    s, tensors = task.instantiate(task.config_space.config(cfg))
    assert [int(x.value) for x in tensors[3].shape][-1] == args[-1]
    ins = [
        RNG.standard_normal([int(d.value) for d in t.shape]).astype(t.dtype) for t in tensors[:3]
    ]
    o = np.full([int(d.value) for d in tensors[3].shape], np.nan, tensors[3].dtype)
    pt.build(s, tensors)(*ins, o)
    tol = 1e-12 if args[6] == "float64" else 2e-6
    np.testing.assert_allclose(o, _ref(args, *ins), atol=tol, rtol=1e-5)


@pytest.mark.parametrize("form", ["two_pass", "flash"])
@pytest.mark.parametrize(
    "args",
    [
        (2, 6, 21, 16, False, None, "float32", None, None, False, None, 2),  # 3 per group
        (1, 4, 19, 8, True, 0.3, "float32", 33, None, False, 12, 1),  # one K/V head
        (1, 4, 17, 16, True, None, "float32", 40, 50, True, None, 2),  # prefix, K^T
    ],
)
def test_attention_grouped_query_heads(args, form):
    """``kv_heads``: K and V with fewer heads than Q, query head h reading key/value
    head h // (H / kv_heads), as SDPA's ``enable_gqa``."""
    task = at.Task("attention", args)
    cfg = dict(task.config_space.default_config().values, form=form)
    s, tensors = task.instantiate(task.config_space.config(cfg))
    assert [int(x.value) for x in tensors[1].shape][1] == args[-1]
    ins = [
        RNG.standard_normal([int(d.value) for d in t.shape]).astype(t.dtype) for t in tensors[:3]
    ]
    o = np.full([int(d.value) for d in tensors[3].shape], np.nan, tensors[3].dtype)
    pt.build(s, tensors)(*ins, o)
    np.testing.assert_allclose(o, _ref(args, *ins), atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("S", [37, 77, 197])
def test_two_pass_attention_pads_the_keys_to_whole_tiles(S):
    """The two-pass form's transposed keys are padded with zero keys to whole key
    tiles, which score -inf: ViT's and CLIP's token counts as the reference, even where
    a query's scores are all large and negative (the padded keys score 0 otherwise)."""
    args = (1, 2, S, 64)
    task = at.Task("attention", args)
    cfg = task.config_space.config(dict(task.config_space.default_config().values, form="two_pass"))
    key_tile = cfg["key_tile"].size[-1]  # the target's vectors: an odd S is never whole
    s, tensors = task.instantiate(cfg)
    kt = next(st.op for st in s.stages if st.op.name == "KT")
    assert int(kt.output(0).shape[-1].value) == -(-S // key_tile) * key_tile
    q, k, v = (RNG.standard_normal((1, 2, S, 64)).astype("float32") for _ in range(3))
    q[0, 0, 0] = k[0, 0].sum(0) * -1e3 / S  # query 0 of head 0: every score far below 0
    o = np.full((1, 2, S, 64), np.nan, np.float32)
    pt.build(s, tensors)(q, k, v, o)
    np.testing.assert_allclose(o, _ref(args, q, k, v), atol=2e-5, rtol=1e-4)


def test_attention_refuses_heads_that_do_not_group():
    with pytest.raises(ValueError, match="6 query heads must be a whole number per key/value"):
        at.get_template("attention")(1, 6, 8, 4, False, None, "float32", None, None, False, None, 4)


@pytest.mark.parametrize("form", ["two_pass", "flash"])
@pytest.mark.parametrize(
    "args",
    [
        (2, 3, 13, 8, False, None, "float32", None, None, False, None, None, "bool:b11k"),
        (1, 4, 21, 16, False, 0.2, "float32", 37, None, False, 12, 2, "float:1hsk"),
        (2, 2, 9, 8, False, None, "float64", None, None, False, None, None, "bool:bhsk"),
    ],
)
def test_attention_with_a_mask(args, form):
    """``mask``: SDPA's ``attn_mask`` (bool: the keys that take part; float: added to
    the scores), broadcast over the dims it lacks; a row masked out gives zeros."""
    task = at.Task("attention", args)
    cfg = dict(task.config_space.default_config().values, form=form)
    s, tensors = task.instantiate(task.config_space.config(cfg))
    ins = [
        RNG.standard_normal([int(d.value) for d in t.shape]).astype(t.dtype) for t in tensors[:3]
    ]
    mshape = [int(d.value) for d in tensors[3].shape]
    if args[-1].startswith("bool"):
        m = RNG.random(mshape) < 0.6
        m[0, ..., 0, :] = False  # the first query (or all of them) of batch 0: no key
    else:
        m = (RNG.standard_normal(mshape) * 2).astype(args[6])
        m[..., 1, :] = -np.inf  # query 1 masked out in every head
    o = np.full([int(d.value) for d in tensors[4].shape], np.nan, tensors[4].dtype)
    pt.build(s, tensors)(*ins, m, o)
    want = _ref(args, *ins, m)
    assert not np.isnan(want).any() and (want == 0).all(axis=-1).any()
    tol = 1e-12 if args[6] == "float64" else 2e-6
    np.testing.assert_allclose(o, want, atol=tol, rtol=1e-5)


def test_attention_refuses_a_bad_mask():
    tpl = at.get_template("attention")
    with pytest.raises(ValueError, match="mask must be 'bool:' or 'float:' and, per dim"):
        tpl(1, 2, 8, 4, False, None, "float32", None, None, False, None, None, "bool:x11k")
    with pytest.raises(ValueError, match="a mask and causal at once"):
        tpl(1, 2, 8, 4, True, None, "float32", None, None, False, None, None, "bool:b11k")


def test_attention_refuses_causal_with_fewer_keys():
    with pytest.raises(ValueError, match="causal needs kv_len >= S .* got kv_len 8 < S 9"):
        at.get_template("attention")(1, 1, 9, 4, True, None, "float32", 8)


def test_attention_tiles_are_knobs_for_the_target():
    space = at.Task("attention", (1, 2, 64, 16), target="x86-avx2").config_space
    assert {"tile_q", "key_tile", "mr_s", "mr_o", "red_lanes"} <= set(space.knobs)
    d = space.default_config()
    assert d["key_tile"].size[-1] % 8 == 0  # whole AVX2 vectors of keys
    d512 = at.Task("attention", (1, 2, 64, 16), target="x86-avx512").config_space.default_config()
    assert d512["key_tile"].size[-1] % 16 == 0


def _moe_case(T, d, F, E, k, dtype="float32"):
    x = RNG.standard_normal((T, d)).astype(dtype)
    wg = (RNG.standard_normal((E, d, F)) / np.sqrt(d)).astype(dtype)
    wu = (RNG.standard_normal((E, d, F)) / np.sqrt(d)).astype(dtype)
    wd = (RNG.standard_normal((E, F, d)) / np.sqrt(F)).astype(dtype)
    ids = np.stack([RNG.choice(E, k, replace=False) for _ in range(T)])
    w = RNG.random((T, k)).astype(dtype)
    return x, wg, wu, wd, ids, w


def _moe_loop(x, wg, wu, wd, ids, w):
    """Per token, per chosen expert: the plain definition, in float64."""
    out = np.zeros(x.shape)
    for t in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e, xx = ids[t, j], x[t].astype(np.float64)
            g = xx @ wg[e]
            out[t] += w[t, j] * ((g / (1 + np.exp(-g)) * (xx @ wu[e])) @ wd[e])
    return out


def _moe_modules(T, d, F, E, k, dtype="float32"):
    """The expert module (the template's default config, rows symbolic) and the combine."""
    cfg = at.Task("moe", (T, d, F, E, k, dtype)).config_space.default_config()
    s, ts = expert_ffn(cfg, T, d, F, pt.var("rows"), nominal_rows(T, k, E), dtype)
    return pt.build(s, ts), pt.build(*combine(T, d, k, dtype))


@pytest.mark.parametrize("T,d,F,E,k", [(13, 24, 40, 4, 2), (30, 17, 23, 3, 1)])
def test_moe_matches_per_token_loop(T, d, F, E, k):
    """One module for every expert's segment (rows bound per call), then the combine."""
    x, wg, wu, wd, ids, w = _moe_case(T, d, F, E, k)
    ids[:, 0] = 0  # a busy expert: its segment is longer than the others
    tok, wt, offsets, pos = moe_route(ids, w, E)
    expert, comb = _moe_modules(T, d, F, E, k)
    y = np.full((T * k, d), np.nan, np.float32)
    lengths = set()
    for e in range(E):
        a, b = offsets[e], offsets[e + 1]
        lengths.add(b - a)
        if b > a:
            expert(x, tok[a:b], wt[a:b], wg[e], wu[e], wd[e], y[a:b])
            ref = _expert_ref(x, tok[a:b], wt[a:b], wg[e], wu[e], wd[e])
            np.testing.assert_allclose(y[a:b], ref, atol=2e-5, rtol=1e-5)
    assert len(lengths) > 1
    out = np.full((T, d), np.nan, np.float32)
    comb(y, pos, out)
    np.testing.assert_allclose(out, _moe_loop(x, wg, wu, wd, ids, w), atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("pack", [0, 1])
def test_moe_expert_reads_weights_packed_in_panels(pack):
    """``panels``: the weights come as ``pack_panels`` made them (N = 37 is no multiple
    of the panel width: the last panel's extra columns are 0 and never read back),
    read in place or (``pack_b``) each panel copied to a local buffer first."""
    T, d, F, E, k = 11, 24, 37, 3, 2
    x, wg, wu, wd, ids, w = _moe_case(T, d, F, E, k)
    space = at.Task("moe", (T, d, F, E, k)).config_space
    knobs = {f"{g}_pack_b": pack for g in ("gate", "up", "down")}
    cfg = space.config({**space.default_config().values, **knobs})
    widths = [panel_width(cfg, g) for g in ("gate", "up", "down")]
    assert F % widths[0] and F % widths[1]
    s, ts = expert_ffn(cfg, T, d, F, pt.var("rows"), 8, "float32", panels=True)
    mod = pt.build(s, ts)
    assert all((f"{w}_local" in mod.source) == bool(pack) for w in ("Wg", "Wu", "Wd"))
    pg, pu = (pack_panels(a.transpose(0, 2, 1), n) for a, n in ((wg, widths[0]), (wu, widths[1])))
    pd = pack_panels(wd.transpose(0, 2, 1), widths[2])
    assert pg.shape == (E, -(-F // widths[0]), d, widths[0])
    assert np.array_equal(pg[1, 0, 3, :5], wg[1, 3, :5])  # panel 0, row 3: W[3, 0..4]
    assert not pg[:, -1, :, F % widths[0] :].any()
    tok = np.array([4, 0, 10, 4, 7], np.int32)
    wt = RNG.random(5).astype(np.float32)
    y = np.full((5, d), np.nan, np.float32)
    mod(x, tok, wt, pg[2], pu[2], pd[2], y)
    np.testing.assert_allclose(y, _expert_ref(x, tok, wt, wg[2], wu[2], wd[2]), atol=2e-5)


@pytest.mark.parametrize(
    "target, kernel, insn",
    [
        ("x86-avx512-bf16", "gemm_avx512bf16_", "vdpbf16ps"),
        ("x86-amx", "gemm_amxbf16_", "_tile_dpbf16ps"),
    ],
)
def test_moe_expert_in_bfloat16_on_the_dot_kernels(target, kernel, insn):
    """bfloat16 experts on a target with BF16: the three GEMMs on the vdpbf16ps kernels,
    or AMX's tiles (built, never run, elsewhere), their weights in pairs of the reduction
    (group 2), within bfloat16's rounding of the float64 reference (G, U, H and Dn are
    bfloat16)."""
    T, d, F, E, k = 32, 64, 96, 4, 2  # 16 rows per expert: AMX's tiles
    task = at.Task("moe", (T, d, F, E, k, "bfloat16"), target=target)
    cfg = task.config_space.default_config()
    isa = dot_kernel(cfg, "bfloat16", d, F, nominal_rows(T, k, E))
    assert isa is not None and isa.group == 2
    s, ts = expert_ffn(cfg, T, d, F, pt.var("rows"), nominal_rows(T, k, E), "bfloat16", panels=True)
    src = pt.build(s, ts, target=target, emit_only=True)
    assert len(set(re.findall(kernel + r"\w+", src))) >= 2  # the GEMMs' dot kernels
    assert insn in src
    assert all(f"{w}_local" in src for w in ("Wg", "Wu", "Wd"))  # panels copied first
    small = at.Task("moe", (T, 8, 12, E, k, "bfloat16"), target=target)
    nominal = nominal_rows(T, k, E)
    assert dot_kernel(small.config_space.default_config(), "bfloat16", 8, 12, nominal) is None
    if not pt.Target(target).can_run():
        return
    mod = pt.build(s, ts, target=target)
    bf = numpy_dtype("bfloat16")
    case = _moe_case(T, d, F, E, k)
    x, wg, wu, wd = (a.astype(bf) for a in case[:4])
    widths = [panel_width(cfg, g) for g in ("gate", "up", "down")]
    packed = [
        pack_panels(a.transpose(0, 2, 1), n, 2)
        for a, n in ((wg, widths[0]), (wu, widths[1]), (wd, widths[2]))
    ]
    rows = math.lcm(*(cfg[g + "_tile_i"].size[-1] for g in ("gate", "up", "down")))
    tok = RNG.integers(0, T, rows).astype(np.int32)  # whole tiles
    wt = RNG.random(rows).astype(bf)
    y = np.zeros((rows, d), bf)
    mod(x, tok, wt, *(p[1] for p in packed), y)
    f64 = lambda a: a.astype(np.float64)  # noqa: E731
    ref = _expert_ref(f64(x), tok, f64(wt), f64(wg[1]), f64(wu[1]), f64(wd[1]))
    np.testing.assert_allclose(f64(y), ref, rtol=2e-2, atol=2e-2 * np.abs(ref).max())


def test_moe_template_is_one_expert_at_balanced_rows():
    x, wg, wu, wd, ids, w = _moe_case(16, 8, 12, 4, 2)
    tok = RNG.integers(0, 16, nominal_rows(16, 2, 4)).astype(np.int32)
    wt = RNG.random(tok.shape).astype(np.float32)
    (y,) = _run("moe", (16, 8, 12, 4, 2), x, tok, wt, wg[1], wu[1], wd[1])
    assert y.shape == (8, 8)
    np.testing.assert_allclose(y, _expert_ref(x, tok, wt, wg[1], wu[1], wd[1]), atol=2e-5)


def test_moe_expert_refuses_a_token_out_of_range():
    x, wg, wu, wd, ids, w = _moe_case(6, 8, 12, 2, 1)
    expert, _ = _moe_modules(6, 8, 12, 2, 1)
    tok, wt = np.array([0, 6], np.int32), np.ones(2, np.float32)
    with pytest.raises(IndexError, match="an index into X computed from data"):
        expert(x, tok, wt, wg[0], wu[0], wd[0], np.zeros((2, 8), np.float32))


def test_moe_route_sorts_rows_by_expert():
    ids = np.array([[2, 0], [0, 1], [2, 1]])
    w = np.array([[0.5, 0.25], [1.0, 2.0], [3.0, 4.0]], np.float32)
    tok, wt, offsets, pos = moe_route(ids, w, 4)
    assert offsets.tolist() == [0, 2, 4, 6, 6]  # expert 3 has no rows
    for t in range(3):
        for j in range(2):
            r = pos[t, j]
            assert offsets[ids[t, j]] <= r < offsets[ids[t, j] + 1]
            assert tok[r] == t and wt[r] == w[t, j]
    assert sorted(pos.ravel().tolist()) == list(range(6))
    tok, wt, offsets, pos = moe_route(ids, w, 4, align=4)  # segments padded to 4 rows
    assert offsets.tolist() == [0, 4, 8, 12, 12] and len(tok) == routed_rows(3, 2, 4, 4) == 18
    for t in range(3):
        for j in range(2):
            r = pos[t, j]
            assert offsets[ids[t, j]] <= r < offsets[ids[t, j]] + 2
            assert tok[r] == t and wt[r] == w[t, j]
    assert (wt != 0).sum() == 6  # the padding rows weigh 0
    with pytest.raises(ValueError, match=r"topk_ids must lie in \[0, 3\), got 0..3"):
        moe_route(np.array([[3, 0]]), np.ones((1, 2), np.float32), 3)
    with pytest.raises(ValueError, match=r"topk_ids must be \[T, k\]"):
        moe_route(np.array([0, 1]), np.ones(2, np.float32), 3)


@pytest.mark.parametrize("dtype,tol", [("float32", 1e-5), ("float64", 1e-12), *SIXTEEN])
@pytest.mark.parametrize("rows,cols", [(5, 37), (9, 300), (2 * ng.COLUMN_ROWS + 3, 33)])
def test_rowwise_forward_and_backward(dtype, tol, rows, cols):
    """The column sums (dw, db) in blocks of rows: one short block, whole blocks and a
    short last one."""
    nd = numpy_dtype(dtype)
    x = RNG.standard_normal((rows, cols)).astype(nd)
    w, b = (RNG.standard_normal(cols).astype(nd) for _ in range(2))
    dy = RNG.standard_normal((rows, cols)).astype(nd)

    def check(got, ref):
        assert got.dtype == nd
        _close16(got, ref, tol)

    check(_run("rmsnorm_fwd", (rows, cols, 1e-6, dtype), x, w)[0], ng.rmsnorm_ref(x, w))
    check(_run("layernorm_fwd", (rows, cols, 1e-5, dtype), x, w, b)[0], ng.layernorm_ref(x, w, b))
    check(_run("softmax_fwd", (rows, cols, dtype), x)[0], ng.softmax_ref(x))
    for got, ref in zip(
        _run("rmsnorm_backward", (rows, cols, 1e-6, dtype), x, w, dy), ng.rmsnorm_grad_ref(x, w, dy)
    ):
        check(got, ref)
    for got, ref in zip(
        _run("layernorm_backward", (rows, cols, 1e-5, dtype), x, w, dy),
        ng.layernorm_grad_ref(x, w, dy),
    ):
        check(got, ref)
    y = ng.softmax_ref(x)
    check(_run("softmax_backward", (rows, cols, dtype), y, dy)[0], ng.softmax_grad_ref(y, dy))


@pytest.mark.parametrize("kind", ["sum", "max"])
def test_row_reductions_halve_their_partials_before_the_scalar_combine(kind):
    """64 vector partials per row, the row's tail added by one vector operation, halved
    down to 4 (a serial chain of 64 scalar operations, and one per element of the tail,
    took most of a short row's time), then combined: as numpy's."""
    from autotune.templates.norm import FOLD_TO, _schedule_reduction, row_reduce

    rows, cols = 6, 64 * 3 + 5
    X = pt.placeholder((rows, cols), "float64", name="X")
    R, stages = row_reduce(kind, lambda i, j: X[i, j], rows, cols, 64, "r")
    assert [int(T.shape[-1].value) for T in stages[:-1]] == [64, 64, 32, 16, 8, FOLD_TO]
    assert int(R.op.reduce_axis[0].dom.extent.value) == FOLD_TO
    s = pt.create_schedule(R.op)
    _schedule_reduction(at.Task("softmax", (rows, cols)).config_space.default_config(), s, stages)
    x = RNG.standard_normal((rows, cols))
    x[0, -1] = 9  # the largest of row 0 in its tail; of row 1 just before it
    x[1, -6] = 9
    out = np.zeros(rows)
    pt.build(s, [X, R])(x, out)
    np.testing.assert_allclose(out, getattr(np, kind)(x, axis=1), rtol=1e-13)


@pytest.mark.parametrize("dtype,tol", [("float32", 1e-5), ("float64", 1e-12), *SIXTEEN])
@pytest.mark.parametrize(
    "rows,groups",
    [(12, 3), (2 * 67, 2), (4 * ng.COLUMN_ROWS + 8, 2), (40, 40)],
    ids=["small-groups", "prime-group", "blocks-per-group", "one-row-each"],
)
def test_backward_column_sums_per_group(dtype, tol, rows, groups):
    """groups=G: dw and db summed per group of rows/G consecutive rows (G x cols, the
    per-sample weight gradients of vmap(grad)); a group of 67 rows in blocks of 1, one
    of 132 in blocks of 44 (three per group), groups of one row."""
    cols = 37
    nd = numpy_dtype(dtype)
    x, dy = (RNG.standard_normal((rows, cols)).astype(nd) for _ in range(2))
    w = RNG.standard_normal(cols).astype(nd)
    for name, ref, eps in (
        ("rmsnorm_backward", ng.rmsnorm_grad_ref, 1e-6),
        ("layernorm_backward", ng.layernorm_grad_ref, 1e-5),
    ):
        got = _run(name, (rows, cols, eps, dtype, None, groups), x, w, dy)
        want = ref(x, w, dy, eps, groups)
        assert [g.shape for g in got] == [(rows, cols)] + [(groups, cols)] * (len(got) - 1)
        for g, r in zip(got, want):
            assert g.dtype == nd
            _close16(g, r, tol)
    assert ng.row_block(2 * 67, 2) == 1 and ng.row_block(4 * ng.COLUMN_ROWS + 8, 2) == 44


@pytest.mark.parametrize(
    "groups, message",
    [(5, "groups=5 does not divide the 12 rows"), (0, "groups must be an int of at least 1")],
)
def test_backward_groups_that_do_not_divide_the_rows_are_refused(groups, message):
    with pytest.raises(ValueError, match=f"layernorm_backward: {message}"):
        at.get_template("layernorm_backward")(12, 8, 1e-5, "float32", None, groups)


@pytest.mark.parametrize("target", ["x86-avx2", "generic"])
def test_attention_other_targets_schedules(target):
    t = pt.Target(target)
    if not t.can_run():
        pytest.skip(f"this machine cannot run {target}")
    args = (1, 2, 33, 64, True, None)
    s, tensors = at.get_template("attention")(*args, target=t)
    mod = pt.build(s, tensors, target=t)
    q, k, v = (RNG.standard_normal((1, 2, 33, 64)).astype("float32") for _ in range(3))
    o = np.empty_like(q)
    mod(q, k, v, o)
    np.testing.assert_allclose(o, _ref(args, q, k, v), atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize(
    "args",
    [(1, 2, 53, 32, False, 0.2), (2, 1, 41, 16, True, None), (1, 1, 24, 48, True, 0.7)],
)
def test_attention_micro_kernel_tiles_match_reference(args):
    """Whole register tiles are gemm_tile calls; ragged ones (S, D not multiples of the
    tiles) keep the loops: both against the reference."""
    t = pt.Target("host")
    task = at.Task("attention", args, target=t)
    if "ukernel" not in task.config_space.knobs:
        pytest.skip(f"{t.name} has no micro-kernels")
    s, tensors = task.instantiate(task.config_space.default_config())
    mod = pt.build(s, tensors, target=t)
    assert "gemm_tile_" in mod.source
    B, H, S, D = args[:4]
    q, k, v = (RNG.standard_normal((B, H, S, D)).astype("float32") for _ in range(3))
    o = np.full_like(q, np.nan)
    mod(q, k, v, o)
    np.testing.assert_allclose(o, _ref(args, q, k, v), atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("target,lanes", [("x86-avx2", 8), ("aarch64-neon", 4)])
def test_attention_micro_kernel_follows_the_target(target, lanes):
    """The tiles' vectors are the task target's, whatever the host."""
    task = at.Task("attention", (1, 2, 64, 32), target=target)
    cfg = task.config_space.default_config()
    s, tensors = task.instantiate(cfg)
    src = pt.build(s, tensors, target=target, emit_only=True)
    mr, kt = cfg["mr_s"].val, cfg["key_tile"].size[-1]
    assert f"gemm_tile_{'neon' if lanes == 4 else 'avx2'}_{mr}x{kt}x32(" in src
    assert kt % lanes == 0
    assert "gemm_tile_" not in pt.build(
        *at.get_template("attention")(1, 2, 64, 32, target="generic"),
        target="generic",
        emit_only=True,
    )


def test_attention_reads_a_prefix_of_the_keys():
    """kv_rows: K and V hold more rows than the kv_len keys read (a causal chunk's view),
    K as given or transposed."""
    args = (1, 2, 12, 16, True, None, "float32", 30, 47)
    q = RNG.standard_normal((1, 2, 12, 16)).astype("float32")
    k, v = (RNG.standard_normal((1, 2, 47, 16)).astype("float32") for _ in range(2))
    (o,) = _run("attention", args, q, k, v)
    ref = _ref(args[:7], q, k[:, :, :30], v[:, :, :30])
    np.testing.assert_allclose(o, ref, atol=2e-6, rtol=1e-5)
    kt = np.ascontiguousarray(np.swapaxes(k, 2, 3))  # k_transposed: [B, H, D, kv_rows]
    (o_t,) = _run("attention", (*args, True), q, kt, v)
    np.testing.assert_allclose(o_t, ref, atol=2e-6, rtol=1e-5)
    with pytest.raises(ValueError, match="kv_rows 20 < kv_len 30"):
        at.get_template("attention")(1, 2, 12, 16, True, None, "float32", 30, 20)


def _flash(args, key_block=None, **knobs):
    """The flash form of ``args``; ``key_block`` the target's nearest block size at least as
    large (the sizes are multiples of the target's lanes, so they differ by target)."""
    task = at.Task("attention", args)
    if key_block is not None:
        sizes = task.config_space.knobs["key_block"].values
        knobs["key_block"] = min([b for b in sizes if b >= key_block] or [max(sizes)])
    cfg = dict(task.config_space.default_config().values, form="flash", **knobs)
    s, tensors = task.instantiate(task.config_space.config(cfg))
    return pt.build(s, tensors), tensors


@pytest.mark.parametrize(
    "args,key_block",
    [
        ((1, 2, 37, 16, False, None), 16),  # 3 blocks, the last one partial
        ((2, 1, 45, 20, True, 0.3), 32),
        ((1, 1, 5, 3, True, None), 16),  # one block, mostly padding
        ((1, 2, 70, 32, True, None, "float32", 100, 130, True), 64),  # chunk of a causal call
        ((1, 2, 33, 16, True, None, "float64"), 16),
    ],
)
def test_flash_form_matches_reference(args, key_block):
    """The online softmax over key blocks (update definitions) against the float64 reference."""
    mod, tensors = _flash(args, key_block=key_block)
    ins = [
        RNG.standard_normal([int(d.value) for d in t.shape]).astype(t.dtype) for t in tensors[:3]
    ]
    o = np.full([int(d.value) for d in tensors[3].shape], np.nan, tensors[3].dtype)
    mod(*ins, o)
    tol = 1e-12 if tensors[3].dtype == "float64" else 2e-6
    np.testing.assert_allclose(o, _ref(args, *ins), atol=tol, rtol=1e-5)


def test_flash_form_holds_no_row_of_scores():
    """Every buffer of the flash form is at most tile_q x key_block scores; the two-pass
    form holds tile_q x S of them."""
    S, tq, kb = 512, 16, 64
    sizes = {}
    for form in ("flash", "two_pass"):
        task = at.Task("attention", (1, 1, S, 32))
        cfg = dict(task.config_space.default_config().values, form=form, key_block=kb)
        cfg["tile_q"] = [-1, tq]
        s, tensors = task.instantiate(task.config_space.config(cfg))
        text = str(pt.lower(s, tensors))
        sizes[form] = max(
            int(np.prod([int(x) for x in m.split(", ")]))
            for m in re.findall(r"alloc \w+: float32\[([\d, ]+)\] local", text)
        )
    assert sizes["flash"] <= tq * kb < tq * S <= sizes["two_pass"]


def test_flash_form_skips_key_blocks_above_the_diagonal():
    """Causal: the block loop of a query tile ends at the tile's last query's block (its
    extent depends on the task); not causal: every block."""
    for causal in (True, False):
        task = at.Task("attention", (1, 2, 256, 16, causal, None))
        cfg = dict(task.config_space.default_config().values, form="flash", key_block=64)
        cfg["tile_q"] = [-1, 16]
        text = str(pt.lower(*task.instantiate(task.config_space.config(cfg))))
        (bound,) = re.findall(r"for \(rt, 0, ([^)]+)\)", text)
        assert (bound == "4") == (not causal), bound
        if causal:  # 2 heads x 16 tiles of 16 queries; a block of 64 keys per 4 tiles
            (task_var,) = set(re.findall(r"[a-z_]\w*", bound))
            blocks = [eval(bound, {task_var: x}) for x in range(32)]
            assert blocks == [(x % 16) // 4 + 1 for x in range(32)], bound


def test_flash_score_tiles_divide_the_key_block():
    """A key tile that does not divide the block (48 of 128) is narrowed to whole vectors
    that do (32): every score tile is then one micro-kernel call, none left to loops."""
    target = pt.Target("x86-avx512")
    task = at.Task("attention", (1, 2, 256, 64, True, None), target=target)
    cfg = dict(task.config_space.default_config().values, form="flash", key_block=128)
    cfg.update(key_tile=[-1, 48], tile_q=[-1, 32], mr_s=8, ukernel=1)
    src = pt.build(*task.instantiate(task.config_space.config(cfg)), target=target,
                   emit_only=True)  # fmt: skip
    calls = re.findall(r"(gemm_tile_avx512_8x\d+x64)\(Q", src)
    assert calls and set(calls) == {"gemm_tile_avx512_8x32x64"}
