"""int8 and bfloat16 ``conv2d_nchw`` on AMX's tiles (``x86-amx``): the kernel comes from
the task's target (built emit-only on any host); where this machine runs AMX, the int32
output equals numpy's exactly, and the bfloat16 one is within bfloat16's rounding of
float64, for strides, paddings, ragged rows of pixels and batches."""

from __future__ import annotations

import numpy as np
import pytest

import autotune as at
import pypto as pt
from autotune.templates import conv_amx
from autotune.templates.conv2d import conv2d_reference
from pypto.dtypes import numpy_dtype

AMX = pt.Target("x86-amx")
RNG = np.random.default_rng(5)


def _build(args, target=AMX, emit_only=False, **knobs):
    task = at.Task("conv2d_nchw", args, target=target)
    cfg = dict(task.config_space.default_config().values, **knobs)
    s, tensors = task.instantiate(task.config_space.config(cfg))
    return pt.build(s, tensors, target=target, name="conv", emit_only=emit_only), tensors


def test_int8_convolution_takes_the_tiles_where_channels_fill_them():
    src, _ = _build((1, 64, 12, 12, 32, 3, 3, 1, 1, "int8"), emit_only=True)
    assert "conv_amxint8_c64_r3s3_st1_" in src and "_tile_dpbssd" in src
    assert "pad_nhwc" in src  # pixels with their channels adjacent: tiles of A in place
    # 32 input channels do not fill a tile's 64 bytes: the vector dot kernel
    src, _ = _build((1, 32, 12, 12, 32, 3, 3, 1, 1, "int8"), emit_only=True)
    assert "_tile_dpbssd" not in src and "conv_avx512vnni" in src
    assert not conv_amx.usable(pt.Target("x86-avx512-bf16"), "int8", 64, 64)
    assert not conv_amx.usable(AMX, "float32", 64, 64)


def test_bfloat16_convolution_takes_the_tiles_where_channels_fill_them():
    src, _ = _build((1, 32, 12, 12, 32, 3, 3, 1, 1, "bfloat16"), emit_only=True)
    assert "conv_amxbfloat16_c32_r3s3_st1_" in src and "_tile_dpbf16ps" in src
    src, _ = _build((1, 16, 12, 12, 32, 3, 3, 1, 1, "bfloat16"), emit_only=True)
    assert "_tile_dpbf16ps" not in src  # 16 channels: half a tile row; float32 arithmetic


def test_a_tile_the_registers_do_not_hold_is_refused():
    with pytest.raises(ValueError, match="48 pixels x 32 channels are not 1 or 2 AMX tiles"):
        conv_amx.conv_tile("int8", 64, 3, 3, 48, 32, 1)
    with pytest.raises(ValueError, match="C=96 is not a multiple of 64"):
        conv_amx.conv_tile("int8", 96, 3, 3, 16, 16, 1)
    with pytest.raises(ValueError, match="C=48 is not a multiple of 32"):
        conv_amx.conv_tile("bfloat16", 48, 3, 3, 16, 16, 1)


@pytest.mark.parametrize(
    "args, knobs",
    [
        ((1, 64, 10, 12, 32, 3, 3, 1, 1, "int8"), {}),
        ((2, 128, 9, 7, 48, 3, 3, 2, 1, "int8"), {"amx_w": [-1, 16], "amx_k": [-1, 16]}),
        ((1, 64, 20, 37, 16, 1, 1, 1, 0, "int8"), {}),  # 37 pixels: two tiles of 32 padded
        ((1, 64, 11, 11, 64, 5, 5, 2, 2, "int8"), {"amx_w": [-1, 16]}),
    ],
)
def test_int8_convolution_on_the_tiles_is_exact(args, knobs):
    if not AMX.can_run():
        pytest.skip("this machine cannot run x86-amx")
    mod, tensors = _build(args, **knobs)
    N, C, H, W, K, R, S, st, p = args[:9]
    d = RNG.integers(-128, 128, (N, C, H, W)).astype(np.int8)
    w = RNG.integers(-128, 128, (K, C, R, S)).astype(np.int8)
    d.flat[:3], w.flat[:3] = -128, -128  # the extremes: products of 2^14, sums past int16
    out = np.full([int(x.value) for x in tensors[-1].shape], -1, np.int32)
    mod(d, w, out)
    np.testing.assert_array_equal(out, conv2d_reference(d, w, stride=st, padding=p))


@pytest.mark.parametrize(
    "args",
    [
        (1, 32, 10, 12, 32, 3, 3, 1, 1, "bfloat16"),
        (2, 64, 9, 7, 48, 3, 3, 2, 1, "bfloat16"),
        (1, 96, 6, 40, 16, 1, 1, 1, 0, "bfloat16"),
    ],
)
def test_bfloat16_convolution_on_the_tiles_matches_reference(args):
    """float32 sums of bfloat16 products, rounded once: within 2^-8 of float64."""
    if not AMX.can_run():
        pytest.skip("this machine cannot run x86-amx")
    mod, tensors = _build(args)
    N, C, H, W, K, R, S, st, p = args[:9]
    bf = numpy_dtype("bfloat16")
    d = RNG.standard_normal((N, C, H, W)).astype(bf)
    w = RNG.standard_normal((K, C, R, S)).astype(bf)
    out = np.full([int(x.value) for x in tensors[-1].shape], np.nan, bf)
    mod(d, w, out)
    ref = conv2d_reference(d.astype(np.float64), w.astype(np.float64), stride=st, padding=p)
    got = out.astype(np.float64)
    np.testing.assert_allclose(got, ref, rtol=8e-3, atol=8e-3 * np.abs(ref).max())
