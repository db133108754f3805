"""Attention's decode form (``autotune/templates/attention_decode.py``): a few queries
per head read K and V in place, once each, and match the float64 reference with
every option the other forms take (causal, a mask, grouped-query heads, another value
dim, a prefix of K and V, float64), at head dims of whole vectors, with a tail, and
shorter than a vector."""

from __future__ import annotations

import numpy as np
import pytest

import autotune as at
import pypto as pt
from autotune.templates import attention_decode
from pypto.dtypes import numpy_dtype

RNG = np.random.default_rng(11)

# (B, H, S, D, causal, scale, dtype, kv_len, kv_rows, k_transposed, dv, kv_heads, mask)
CASES = [
    (2, 3, 1, 64, False, None, "float32", 300, None, False, None, None, None),
    (1, 2, 1, 20, False, 0.3, "float32", 77, None, False, None, None, None),  # D: a tail
    (1, 2, 2, 5, False, None, "float32", 40, None, False, None, None, None),  # D < lanes
    (1, 4, 3, 32, True, None, "float32", 50, 64, False, None, None, None),  # causal prefix
    (2, 4, 4, 16, False, None, "float64", 33, None, False, 24, 2, None),  # dv, grouped
    (1, 8, 1, 32, False, None, "float32", 100, None, False, None, 2, "bool:b11k"),
    (2, 2, 2, 16, False, None, "float32", 45, None, False, None, None, "float:1hsk"),
]


def _shape(t) -> list:
    return [int(d.value) for d in t.shape]


@pytest.mark.parametrize("args", CASES)
def test_the_decode_form_matches_the_reference(args):
    task = at.Task("attention", args)
    cfg = task.config_space.default_config()
    assert cfg["form"].val == "decode"  # the default for a few queries
    s, tensors = task.instantiate(cfg)
    ins = [RNG.standard_normal(_shape(t)).astype(t.dtype) for t in tensors[:3]]
    if args[-1] is not None:  # a mask: a query of batch 0 that sees no key
        m = RNG.random(_shape(tensors[3])) < 0.6 if args[-1].startswith("bool") else None
        if m is None:
            m = (RNG.standard_normal(_shape(tensors[3])) * 2).astype(args[6])
            m[..., 1, :] = -np.inf
        else:
            m[0, ..., 0, :] = False
        ins.append(m)
    mod = pt.build(s, tensors)
    o = np.full(_shape(tensors[-1]), np.nan, tensors[-1].dtype)
    mod(*ins, o)
    want = task.template.reference_output(ins, args)[0]
    tol = 1e-12 if args[6] == "float64" else 2e-6
    np.testing.assert_allclose(o, want, atol=tol, rtol=1e-5)
    assert "KT[" not in mod.source  # K read in place: no transposed copy


def test_the_decode_form_is_offered_for_a_few_queries_with_k_rows_contiguous():
    def forms(S, k_transposed=False):
        args = (1, 2, S, 16, False, None, "float32", 64, None, k_transposed)
        return at.Task("attention", args).config_space.knobs["form"].values

    assert "decode" in forms(attention_decode.DECODE_QUERIES)
    assert "decode" not in forms(attention_decode.DECODE_QUERIES + 1)
    assert "decode" not in forms(1, k_transposed=True)  # K^T: its rows are columns


# bfloat16 on the targets with a bfloat16 dot instruction: decode is their default too,
# in float32 from 16-bit Q, K and V, the output rounded once
BF16_CASES = [
    (1, 2, 1, 64, False, None, "bfloat16", 70),
    (2, 4, 3, 32, True, None, "bfloat16", 45, 64, False, 48, 2),  # causal, dv, grouped
    (1, 2, 2, 64, False, None, "bfloat16", 40, None, False, None, None, "float:1hsk"),
]


@pytest.mark.parametrize("target", ["x86-amx", "x86-avx512-bf16"])
@pytest.mark.parametrize("args", BF16_CASES)
def test_bfloat16_decode_matches_the_reference(args, target):
    t = pt.Target(target)
    task = at.Task("attention", args, target=t)
    cfg = task.config_space.default_config()
    assert cfg["form"].val == "decode"
    s, tensors = task.instantiate(cfg)
    if not t.can_run():  # its C at least (any host)
        assert "Dot_p" in pt.build(s, tensors, target=t, emit_only=True)
        pytest.skip(f"this machine cannot run {target}")
    bf = numpy_dtype("bfloat16")
    ins = [RNG.standard_normal(_shape(x)).astype(bf) for x in tensors[:3]]
    if len(tensors) == 5:
        ins.append((RNG.standard_normal(_shape(tensors[3])) * 2).astype(bf))
    out = np.full(_shape(tensors[-1]), np.nan, bf)
    pt.build(s, tensors, target=t)(*ins, out)
    ref = task.template.reference_output(ins, args)[0].astype(np.float64)
    np.testing.assert_allclose(out.astype(np.float64), ref, atol=1e-2, rtol=1e-2)


# bfloat16 and float16 where the target has no bfloat16 dot instruction: only the decode
# form, in float32, K and V widened where they are read (float16 by the target's
# conversion instructions where it has them: a row of K or V at a time)
WIDE_CASES = [
    (1, 3, 1, 40, False, None, "{}", 70),  # D: whole vectors and a tail
    (2, 4, 3, 24, True, None, "{}", 45, 64, False, 20, 2),  # causal prefix, dv, grouped
    (1, 2, 2, 5, False, None, "{}", 33, None, False, None, None, "float:1hsk"),  # D < lanes
]


@pytest.mark.parametrize("target", ["x86-avx2", "generic"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", WIDE_CASES)
def test_16_bit_decode_without_a_dot_instruction_matches_the_reference(case, dtype, target):
    args = tuple(a.format(dtype) if a == "{}" else a for a in case)
    t = pt.Target(target)
    task = at.Task("attention", args, target=t)
    assert task.config_space.knobs["form"].values == ["decode"]  # the only form
    s, tensors = task.instantiate(task.config_space.default_config())
    mod = pt.build(s, tensors, target=t)
    assert ("widen_f16c_f16_" in mod.source) == (dtype == "float16" and t.has("f16c"))
    nd = numpy_dtype(dtype)
    ins = [RNG.standard_normal(_shape(x)).astype(nd) for x in tensors[:3]]
    if len(tensors) == 5:
        ins.append((RNG.standard_normal(_shape(tensors[3])) * 2).astype(nd))
    out = np.full(_shape(tensors[-1]), np.nan, nd)
    mod(*ins, out)
    ref = task.template.reference_output(ins, args)[0].astype(np.float64)
    tol = 1e-3 if dtype == "float16" else 8e-3  # a rounding of the output
    np.testing.assert_allclose(out.astype(np.float64), ref, atol=tol, rtol=tol)


@pytest.mark.parametrize(
    "S,k_transposed", [(attention_decode.DECODE_QUERIES + 1, False), (1, True)]
)
def test_16_bit_attention_without_a_dot_instruction_is_the_decode_form_or_refused(S, k_transposed):
    args = (1, 2, S, 32, False, None, "float16", 64, None, k_transposed)
    with pytest.raises(ValueError, match=r"or bfloat16 or float16 with at most 4 queries"):
        at.Task("attention", args, target="x86-avx2").config_space.default_config()


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_task_takes_the_query_heads_of_a_key_value_head(dtype):
    """Grouped-query heads: by default a task per key/value head, its query heads' scores
    and P V rows side by side (K and V read once for the group); a task per query head
    as the other value of ``head_group``. Both match the reference."""
    t = pt.Target("x86-avx2")  # 16 registers: 3 heads x 2 queries of a group fit in 8
    args = (2, 6, 2, 16, False, None, dtype, 40, None, False, 24, 2)
    task = at.Task("attention", args, target=t)
    space = task.config_space
    assert space.knobs["head_group"].values == [1, 3]
    assert space.default_config()["head_group"].val == 3  # 4 tasks, at least one a core
    nd = numpy_dtype(dtype)
    ins = None
    for group in (1, 3):
        cfg = space.config({**space.default_config().values, "head_group": group})
        s, tensors = task.instantiate(cfg)
        if ins is None:
            ins = [RNG.standard_normal(_shape(x)).astype(nd) for x in tensors[:3]]
            ref = task.template.reference_output(ins, args)[0].astype(np.float64)
        out = np.full(_shape(tensors[-1]), np.nan, nd)
        pt.build(s, tensors, target=t)(*ins, out)
        tol = 2e-6 if dtype == "float32" else 1e-3
        np.testing.assert_allclose(out.astype(np.float64), ref, atol=tol, rtol=tol)
    args = (1, 8, 4, 16, False, None, "float32", 40, None, False, None, 2)  # 4 x 4: too many
    assert "head_group" not in at.Task("attention", args, target=t).config_space.knobs
