"""Row-wise templates with streaming (non-temporal) output stores: the ``stream`` knob
where the target has them, its C, and its results against the references."""

from __future__ import annotations

import re

import numpy as np
import pytest

import autotune
import pypto as pt
from autotune.templates.norm_stream import STREAM_STORES, stream_store

HOST = pt.Target("host")
ROWWISE = [
    ("softmax", (7, 37)),
    ("layernorm", (6, 45)),
    ("rmsnorm", (9, 50)),
    ("softmax", (3, 64)),
    ("layernorm", (2, 2100)),
]  # fmt: skip  (more than one chunk, a ragged one)


def _shape(t):
    return tuple(int(d.value) for d in t.shape)


@pytest.mark.skipif(stream_store(HOST) is None, reason="the host target has no streaming stores")
@pytest.mark.parametrize("name,args", ROWWISE, ids=[f"{n}{a}" for n, a in ROWWISE])
@pytest.mark.parametrize("offset", [0, 1, 5])  # the output's start, in floats past 64 bytes
def test_streamed_output_matches_the_reference(name, args, offset):
    tmpl = autotune.get_template(name)
    space = tmpl.space(*args, target=HOST)
    cfg = space.config({**space.default_config().values, "stream": 1})
    s, tensors = tmpl.instantiate(cfg, *args, target=HOST)
    mod = pt.build(s, tensors, target=HOST, name=f"{name}_stream")
    assert "_stream_ps(" in mod.source and "_mm_sfence();" in mod.source
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal(_shape(t)).astype(np.float32) for t in tensors[:-1]]
    shape = _shape(tensors[-1])
    raw = np.full(int(np.prod(shape)) + 32, np.nan, np.float32)
    start = (-raw.ctypes.data % 64) // 4 + offset  # misaligned rows: peeled head and tail
    out = raw[start : start + int(np.prod(shape))].reshape(shape)
    mod(*inputs, out)
    (ref,) = tmpl.reference_output(inputs, args)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target,store", [("x86-avx512", "_mm512_stream_ps"),
                                          ("x86-avx2", "_mm256_stream_ps")])  # fmt: skip
def test_x86_targets_offer_streamed_outputs(target, store):
    t = pt.Target(target)
    tmpl = autotune.get_template("rmsnorm")
    space = tmpl.space(4096, 4096, target=t)
    assert space.default_config()["stream"].val == 1  # measured faster: see norm_stream
    cfg = space.default_config()
    s, tensors = tmpl.instantiate(cfg, 4096, 4096, target=t)
    src = pt.build(s, tensors, target=t, name="rms_big", emit_only=True)
    src = src if isinstance(src, str) else src.source
    chunk = 16 * t.vector_lanes("float32")  # 16 vectors
    call = f"stream_{stream_store(t)[0]}_f32_{chunk}(Yr, 1, Y + (i * 4096 + j_outer * {chunk}), 1);"
    assert f"{store}(" in src and call in src
    # one fence per row, after the row's last chunk, not one per chunk (inside the call)
    assert src.count("_mm_sfence();") == 1
    lines = src.splitlines()
    at = next(n for n, x in enumerate(lines) if call in x)
    fence = next(n for n, x in enumerate(lines) if "_mm_sfence();" in x)
    indent = lambda x: len(x) - len(x.lstrip())  # noqa: E731
    assert fence > at and indent(lines[fence]) < indent(lines[at])  # outside the chunk loop
    assert all(x.strip() == "}" for x in lines[at + 1 : fence])  # at the row's end
    assert "omp parallel for" in src[: src.index(call)]
    # the copy is a registered intrinsic: the schedule replays from its JSON alone
    again = pt.Schedule.from_json(s.to_json(), tensors)
    replayed = pt.build(again, tensors, target=t, name="rms_big", emit_only=True)
    assert (replayed if isinstance(replayed, str) else replayed.source) == src


@pytest.mark.parametrize("name", ["softmax", "layernorm", "rmsnorm"])
def test_row_templates_stream_and_prefetch_the_next_row_into_l2(name):
    """By default each row is streamed out, and the next row of X is prefetched into L2
    by the first elementwise pass, not by the first row reduction (see ``norm``)."""
    t = pt.Target("x86-avx512")
    tmpl = autotune.get_template(name)
    cfg = tmpl.space(4096, 4096, target=t).default_config()
    assert cfg["stream"].val == 1 and cfg["prefetch"].val >= 1
    s, tensors = tmpl.instantiate(cfg, 4096, 4096, target=t)
    src = pt.build(s, tensors, target=t, name=name, emit_only=True)
    lines = (src if isinstance(src, str) else src.source).splitlines()
    reads = [n for n, x in enumerate(lines) if "__builtin_prefetch" in x and ", 0, " in x]
    assert reads and all(re.search(r"\(uintptr_t\)X \+.*, 0, 2\);", lines[n]) for n in reads)
    first_reduction = next(n for n, x in enumerate(lines) if re.search(r"_p\[ln\] = ", x))
    assert first_reduction < min(reads)
    assert any("_mm512_stream_ps" in x for x in lines)


@pytest.mark.parametrize("target", ["generic", "aarch64-neon"])
def test_targets_without_streaming_stores_have_no_stream_knob(target):
    t = pt.Target(target)
    assert stream_store(t) is None
    for name in ("softmax", "layernorm", "rmsnorm"):
        space = autotune.get_template(name).space(4096, 4096, target=t)
        assert "stream" not in space.default_config().values


def test_the_rule_table_names_real_features():
    known = set(pt.Target("x86-avx512").features) | set(pt.Target("x86-avx2").features)
    assert {feat for feat, *_ in STREAM_STORES} <= known
