"""Built-in autotuning templates: default and random configs build and match numpy.

For every template, at small (often non-divisible) sizes: the default config
builds and matches the template's reference; three random points of the space
(fixed seed) do too; the space has more than one point and the default is not
simply its first point.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

import autotune
import pypto as pt
from autotune.templates import norm

CASES = [
    ("matmul", (37, 29, 23)),
    ("matmul", (64, 48, 32)),
    ("matmul", (37, 3, 29)),  # a few columns: the narrow form
    ("batch_matmul", (3, 13, 21, 17)),
    ("conv2d_nchw", (1, 3, 11, 10, 5, 3, 3, 2, 1)),  # stride 2, padding 1
    ("conv2d_nchw", (2, 4, 9, 13, 6, 3, 3, 1, 0)),
    ("conv2d_nchw", (1, 5, 8, 7, 3, 1, 1, 1, 0)),  # 1x1
    ("conv2d_nchw", (1, 2, 9, 12, 3, 3, 2, 2, 0)),  # stride 2, no padding, 3x2 kernel
    ("conv2d_nchw", (1, 5, 9, 11, 16, 3, 3, 1, 1)),  # channels vectorized, ragged tiles
    ("conv2d_nchw", (2, 3, 10, 9, 8, 3, 3, 2, 1)),  # channels vectorized, stride 2
    ("conv2d_nchw_winograd", (1, 3, 9, 13, 5, 3, 3, 1, 1)),  # odd output: partial tiles
    ("conv2d_nchw_winograd", (2, 4, 8, 10, 7, 3, 3, 1, 0)),
    ("conv2d_nchw_winograd", (1, 6, 5, 20, 9, 3, 3, 1, 2)),
    ("depthwise_conv2d_nchw", (1, 5, 12, 11, 3, 3, 2, 1)),
    ("depthwise_conv2d_nchw", (2, 3, 9, 14, 5, 5, 1, 2)),
    ("softmax", (7, 37)),
    ("softmax", (5, 64)),
    ("layernorm", (6, 45)),
    ("layernorm", (3, 8, 0.5)),  # eps given
    ("rmsnorm", (9, 50)),
    ("dense_bias_gelu", (19, 37, 21)),
    ("dense_bias_gelu", (33, 1, 40)),  # the narrow form
]


def _shape(t):
    return tuple(int(d.value) for d in t.shape)


def _check(tmpl, cfg, args, seed=0):
    s, tensors = tmpl.instantiate(cfg, *args)
    mod = pt.build(s, tensors, name=tmpl.name)
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal(_shape(t)).astype(t.dtype) for t in tensors[:-1]]
    out = np.full(_shape(tensors[-1]), np.nan, tensors[-1].dtype)
    mod(*inputs, out)
    (ref,) = tmpl.reference_output(inputs, args)
    assert ref.shape == out.shape and ref.dtype == out.dtype
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4, err_msg=f"{tmpl.name} {cfg}")


@pytest.mark.parametrize("name,args", CASES, ids=[f"{n}{a}" for n, a in CASES])
def test_template(name, args):
    tmpl = autotune.get_template(name)
    space = tmpl.space(*args)
    assert len(space) > 1
    default = space.default_config()
    assert default.values != space.get(0).values
    _check(tmpl, default, args)
    rng = random.Random(1234)
    for _ in range(3):
        cfg = space.get(rng.randrange(len(space)))
        _check(tmpl, cfg, args, seed=1)


def test_all_templates_registered():
    names = set(autotune.list_templates())
    assert {
        "matmul",
        "batch_matmul",
        "conv2d_nchw",
        "depthwise_conv2d_nchw",
        "softmax",
        "layernorm",
        "rmsnorm",
        "dense_bias_gelu",
    } <= names


def test_flops_declared():
    assert autotune.get_template("matmul").space(8, 16, 4).flop == 2 * 8 * 16 * 4
    assert autotune.get_template("softmax").space(4, 32).flop > 0


def test_a_reference_gets_the_template_arguments_it_names():
    tmpl = autotune.get_template("rmsnorm")
    assert tmpl.named_args((4, 8)) == {"rows": 4, "cols": 8, "eps": 1e-6}
    x = np.ones((4, 8), "float32") * 2
    w = np.ones(8, "float32")
    (loose,) = tmpl.reference_output([x, w], (4, 8, 1.0))  # eps = 1: 2 / sqrt(4 + 1)
    np.testing.assert_allclose(loose, 2 / np.sqrt(5.0), rtol=1e-6)
    (tight,) = tmpl.reference_output([x, w], (4, 8))  # the default eps
    np.testing.assert_allclose(tight, 2 / np.sqrt(4 + 1e-6), rtol=1e-6)


@pytest.mark.parametrize(
    "name, args, message",
    [
        ("conv2d_nchw", (1, 3, 8, 8, 4, 3, 3, 0, 0), "stride must be at least 1 .* stride=0"),
        ("depthwise_conv2d_nchw", (1, 3, 8, 8, 3, 3, 1, -1), r"padding at least 0, .*padding=-1"),
        ("conv2d_nchw", (1, 3, 2, 2, 5, 3, 3, 1, 0), "a 3-wide kernel does not fit 2 \\+ 2 x 0"),
        ("moe", (16, 32, 64, 4, 5), r"moe: topk must be 1 to experts \(4\), got 5"),
    ],
)
def test_impossible_workloads_are_refused_by_name(name, args, message):
    """A stride of 0 used to divide by zero; a topk above the experts was accepted."""
    with pytest.raises(ValueError, match=message):
        autotune.Task(name, args)


def test_arguments_that_do_not_fit_a_template_name_its_parameters():
    with pytest.raises(TypeError, match=r"softmax takes \(rows, cols\), got \(128, 256, "
                                        r"'float16'\); softmax_fwd takes a dtype"):  # fmt: skip
        autotune.Task("softmax", (128, 256, "float16"))
    with pytest.raises(TypeError, match=r"matmul takes \(M, N, K, dtype\), got \(1, 2\)$"):
        autotune.Task("matmul", (1, 2))


@pytest.mark.parametrize(
    "name,args",
    [
        ("matmul", (512, 1, 1024)),  # a matrix-vector product: B one column
        ("matmul", (33, 1, 17)),
        ("matmul", (1, 64, 64)),
        ("matmul", (1, 1, 1)),
        ("batch_matmul", (2, 5, 1, 9)),
        ("dense_bias_gelu", (1, 1, 7)),
    ],
)
def test_the_default_config_builds_where_a_dimension_is_one(name, args):
    """Was: matmul's default for N = 1 prefetched the next panel of B over a loop of one
    iteration, which the index no longer named: ScheduleError at build."""
    tmpl = autotune.get_template(name)
    _check(tmpl, tmpl.space(*args).default_config(), args)


@pytest.mark.parametrize("target", ["x86-avx2", "x86-avx512", "generic"])
def test_a_matmul_of_one_column_panel_reads_b_in_place_and_runs_rows_in_parallel(target):
    """With N within one panel of the tile the panel loop had one iteration, the only
    parallel loop: one thread worked (8192 x 16 x 256, 2 threads of a Zen 4: 1.1 ms, now
    0.35), and B was copied into a panel it already is."""
    tmpl = autotune.get_template("matmul")
    nr = tmpl.space(64, 4096, 64, target=target).default_config()["tile_j"].size[-1]
    one = tmpl.space(300, nr, 37, target=target).default_config()
    assert (one["par"].val, one["pack_b"].val) == ("rows", 0)
    wide = tmpl.space(300, nr + 1, 37, target=target).default_config()
    assert wide["par"].val == "panel" and wide["pack_b"].val != 0
    if target == "generic":  # the host's one-panel default builds and matches numpy
        nr = tmpl.space(64, 4096, 64).default_config()["tile_j"].size[-1]
        cfg = tmpl.space(300, nr - 3, 37).default_config()
        assert cfg["par"].val == "rows"
        _check(tmpl, cfg, (300, nr - 3, 37))


@pytest.mark.parametrize("name", ["softmax", "layernorm", "rmsnorm"])
@pytest.mark.parametrize("rows, cols, block", [(999, 48, True), (13, 64, True), (9, 65, False)])
def test_short_rows_are_computed_a_block_at_a_time(name, rows, cols, block):
    """Rows of at most 64 floats, four at a time (``norm.ROW_BLOCK``): their reductions'
    latency chains overlap (softmax 16384 x 64 on one thread of a Zen 4: 1153 -> 524
    us). A ragged last block of rows takes its own loop."""
    tmpl = autotune.get_template(name)
    cfg = tmpl.space(rows, cols).default_config()
    _check(tmpl, cfg, (rows, cols))
    s, tensors = tmpl.instantiate(cfg, rows, cols)
    parallel = pt.build(s, tensors).source.split("#pragma omp parallel for")[1]
    outer = f"i_outer < {-(-rows // norm.ROW_BLOCK)};" if block else f"i < {rows};"
    assert outer in parallel.splitlines()[1]
