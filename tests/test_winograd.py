"""conv2d_nchw_winograd: F(2 x 2, 3 x 3) tiles against the float64 direct convolution,
at a layer's channel count (the transforms' rounding stays small), and its refusals."""

from __future__ import annotations

import numpy as np
import pytest

import autotune
import pypto as pt
from autotune.templates.winograd import MATRICES
from pypto.errors import ScheduleError


@pytest.mark.parametrize("m", sorted(MATRICES))
def test_the_transforms_are_winograds_minimal_filtering(m):
    """A^T [(G g G^T) * (B^T d B)] A is the m x m valid correlation of d ((m+2)^2) with g."""
    rng = np.random.default_rng(0)
    d, g = rng.standard_normal((m + 2, m + 2)), rng.standard_normal((3, 3))
    bt, gm, at = (np.array(x, float) for x in MATRICES[m])
    got = at @ ((gm @ g @ gm.T) * (bt @ d @ bt.T)) @ at.T
    want = np.array([[np.sum(d[y : y + 3, x : x + 3] * g) for x in range(m)] for y in range(m)])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("m", sorted(MATRICES))
@pytest.mark.parametrize("args", [(1, 32, 14, 17, 24, 3, 3, 1, 1), (2, 16, 6, 6, 16, 3, 3, 1, 0)])
def test_matches_the_direct_convolution_in_float64(args, m):
    tmpl = autotune.get_template("conv2d_nchw_winograd")
    space = tmpl.space(*args)
    s, tensors = tmpl.instantiate({**space.default_config().values, "tile_size": m}, *args)
    mod = pt.build(s, tensors)
    rng = np.random.default_rng(1)
    x = rng.standard_normal(tuple(int(d.value) for d in tensors[0].shape))
    w = rng.standard_normal(tuple(int(d.value) for d in tensors[1].shape))
    x, w = x.astype("float32"), w.astype("float32")
    out = np.full(tuple(int(d.value) for d in tensors[2].shape), np.nan, "float32")
    mod(x, w, out)
    (ref,) = tmpl.reference_output([x, w], args)
    scale = np.abs(ref).max()
    # 32 channels x 9 taps in float32; F(4 x 4)'s transforms (up to 8x) lose more
    assert np.abs(out - ref).max() <= (1e-5 if m == 2 else 1e-4) * scale


@pytest.mark.parametrize(
    "args,match",
    [
        ((1, 4, 8, 8, 4, 5, 5, 1, 2), "3 x 3 filters at stride 1, got 5 x 5 at stride 1"),
        ((1, 4, 8, 8, 4, 3, 3, 2, 1), "got 3 x 3 at stride 2: use conv2d_nchw"),
        ((1, 4, 8, 8, 4, 3, 3, 1, 1, "int8"), "computes float32, got int8: use conv2d_nchw"),
        ((1, 4, 1, 1, 4, 3, 3, 1, 0), "no output for C=4, H=1, W=1"),
    ],
)
def test_what_it_cannot_compute_is_refused(args, match):
    with pytest.raises(ScheduleError, match=match):
        autotune.get_template("conv2d_nchw_winograd").space(*args)
