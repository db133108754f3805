"""bfloat16 attention on the dot instructions, AMX's tiles (``x86-amx``) or
``vdpbf16ps`` (``x86-avx512-bf16``): both GEMMs of the flash form are kernel calls
(built emit-only on any host); where this machine runs the target, the outputs are
within bfloat16's rounding of the float64 reference, for causal, masked, grouped-query
and ragged shapes (the ragged tiles run as loops)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import autotune as at
import pypto as pt
from autotune.templates import attention_amx
from autotune.templates.dot_ukernels import gemm_tile, usable
from pypto.dtypes import numpy_dtype

AMX = pt.Target("x86-amx")
BF16_TARGET = pt.Target("x86-avx512-bf16")
BF16 = "bfloat16"
RNG = np.random.default_rng(11)


def _args(B, H, S, D, causal=False, kv_len=None, dv=None, kv_heads=None, mask=None, kt=False):
    return (B, H, S, D, causal, None, BF16, kv_len, None, kt, dv, kv_heads, mask)


def _build(args, target=AMX, emit_only=False):
    task = at.Task("attention", args, target=target)
    s, tensors = task.instantiate(task.config_space.default_config())
    return pt.build(s, tensors, target=target, name="att", emit_only=emit_only), tensors


def test_both_gemms_are_tile_kernel_calls():
    src, _ = _build(_args(1, 2, 64, 64), emit_only=True)
    calls = set(re.findall(r"(gemm_amxbf16\w*)\(Q|(gemm_amxbf16_af32\w*)\(P", src))
    score, pv = {c[0] for c in calls} - {""}, {c[1] for c in calls} - {""}
    assert score and pv  # Q . K on the tiles, and P (float32, rounded by the kernel) . V
    assert "_tile_dpbf16ps" in src and "_mm512_cvtne2ps_pbh" in src
    assert "KP[" in src and "VP[" in src  # K and V packed once per call


def test_both_gemms_are_vdpbf16ps_kernel_calls_without_amx():
    src, _ = _build(_args(1, 2, 64, 64), target=BF16_TARGET, emit_only=True)
    assert re.search(r"gemm_avx512bf16_\w*\(Q", src)  # Q . K, pairs of D broadcast
    assert re.search(r"gemm_avx512bf16_af32\w*\(P", src)  # P rounded in the kernel
    assert "vdpbf16ps" in src and "_mm512_cvtne2ps_pbh" in src and "_tile_" not in src


def test_bfloat16_attention_needs_a_dot_instruction():
    with pytest.raises(ValueError, match="bfloat16 on a target with a bfloat16 dot"):
        _build(_args(1, 2, 64, 64), target=pt.Target("x86-avx512"), emit_only=True)
    with pytest.raises(ValueError, match=r"even query/key dim .*\(target x86-amx, dim 47\)"):
        _build(_args(1, 2, 64, 47), emit_only=True)
    # a dim of 48 is not whole steps of AMX's tiles: vdpbf16ps, which x86-amx has too
    src, _ = _build(_args(1, 2, 64, 48), emit_only=True)
    assert "gemm_avx512bf16_" in src and "gemm_amxbf16" not in src
    assert attention_amx.tile_isa(AMX, "float32", 64) is None


def test_a_float32_a_is_for_the_bfloat16_kernels_only():
    isa = usable(AMX, "int8", 128, 64, 64)
    with pytest.raises(ValueError, match="float32 A is for bfloat16 kernels, not amxint8"):
        gemm_tile(isa, 32, 32, 128, lambda a, b: a * b, a_float=True)
    vec = usable(BF16_TARGET, "bfloat16", 64, 16, 16)
    with pytest.raises(ValueError, match="float32 A needs K in whole 32s, got 48"):
        gemm_tile(vec, 4, 32, 48, lambda a, b: a * b, a_float=True)


CASES = [
    _args(1, 2, 64, 64),
    _args(1, 2, 100, 64, causal=True),  # a ragged query tile and key block
    _args(2, 3, 37, 32, kv_len=70),  # more keys than queries, whole steps of 32 in D
    _args(1, 4, 50, 64, dv=40, kv_heads=2),  # a ragged value dim, grouped heads
    _args(1, 2, 33, 64, causal=True, kv_len=300),  # causal over a longer prefix
    _args(1, 2, 48, 64, mask="float:1hsk"),
    _args(1, 2, 48, 64, mask="bool:b11k"),
    _args(1, 2, 40, 128, kt=True, dv=128),  # K given transposed; 128 deep, two V panels
]


@pytest.mark.parametrize("target", [AMX, BF16_TARGET], ids=["amx", "vdpbf16ps"])
@pytest.mark.parametrize("args", CASES)
def test_bfloat16_attention_on_the_dot_kernels_matches_reference(args, target):
    if not target.can_run():
        pytest.skip(f"this machine cannot run {target.name}")
    mod, tensors = _build(args, target)
    bf = numpy_dtype(BF16)
    ins = []
    for t in tensors[:-1]:
        shape = [int(d.value) for d in t.shape]
        if str(t.dtype) == "bool":
            ins.append(RNG.random(shape) > 0.3)
        else:
            ins.append(RNG.standard_normal(shape).astype(bf))
    out = np.full([int(d.value) for d in tensors[-1].shape], np.nan, bf)
    mod(*ins, out)
    ref = at.get_template("attention").reference_output(ins, args)[0].astype(np.float64)
    got = out.astype(np.float64)
    assert not np.isnan(got).any()
    # P rounded to bfloat16 for the P V product, the output rounded once
    np.testing.assert_allclose(got, ref, atol=2e-2 * max(1.0, np.abs(ref).max()), rtol=2e-2)
