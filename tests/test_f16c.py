"""float16 rows converted by the target's instructions (``autotune/templates/f16c.py``):
the templates that read float16 in place (the skinny and narrow products), row by
row (softmax and the norms) or chunk by chunk (gelu) convert it with ``vcvtph2ps`` /
``vcvtps2ph`` where the target has them, and compute what the integer conversions
compute (bit for bit, or within one unit in the last place where gcc fuses the same
float32 expression's multiply-adds differently in the two loop nests), which match
the float64 references; ragged shapes take the
calls for whole rows and plain loops for the rest."""

from __future__ import annotations

import numpy as np
import pytest

import autotune as at
import pypto as pt
from autotune.templates import f16c
from autotune.workers import Runner, _random_inputs
from pypto import emulate

CASES = [
    # the streamed form: a vector of each of a pass's rows of B at a time; short rows whole
    ("matmul", (1, 1000, 300)),
    ("matmul", (3, 70, 37)),
    ("batch_matmul", (3, 2, 100, 40)),
    # the narrow form (A read in place) and the skinny dense form (W read in place): a
    # step of the lane partials converted at a time; K with a tail
    ("matmul", (200, 1, 300)),
    ("matmul", (70, 3, 130)),
    ("dense", (2, 50, 300)),
    ("dense", (200, 2, 129)),
    # rows converted whole (cols > ROW_CHUNK: chunks and a partial one), outputs narrowed
    ("softmax_fwd", (5, 2500)),
    ("softmax_fwd", (9, 37)),  # rows shorter than a vector's chunk
    ("rmsnorm_fwd", (6, 300, 1e-6)),
    ("layernorm_fwd", (7, 1100, 1e-5)),
    ("softmax_backward", (5, 2500)),  # two inputs converted by rows
    ("softmax_backward", (9, 37)),
    # the statistics, the rows of dx and the column sums' blocks each convert their rows
    ("rmsnorm_backward", (70, 1100, 1e-6)),
    ("layernorm_backward", (9, 37, 1e-5)),
    # element-wise: a chunk converted, computed and narrowed at a time; a partial chunk
    ("gelu", (3, 1000, "none")),
    ("gelu", (4, 40, "tanh")),
]
# the outputs narrowed too
NARROWED = (
    "softmax_fwd",
    "rmsnorm_fwd",
    "layernorm_fwd",
    "gelu",
    *(f"{name}_backward" for name in ("softmax", "rmsnorm", "layernorm")),
)


def _target(name: str) -> pt.Target:
    t = pt.Target(name)
    why = emulate.why_not_runnable(t) or (f16c.conversion(t) is None and f"{name}: no F16C")
    if why:
        pytest.skip(why)
    return t


def _run(task, monkeypatch, convert: bool):
    """The default config's source and its outputs on fixed inputs, with the target's
    conversion instructions (``convert``) or the integer conversions."""
    with monkeypatch.context() as m:
        if not convert:
            m.setattr(f16c, "conversion", lambda target: None)
        s, ts = task.instantiate(task.config_space.default_config())
        mod = pt.build(s, ts, target=task.target)
    arrays, outs = _random_inputs(ts, np.random.default_rng(3))
    mod(*arrays)
    return mod.source, ts, arrays, outs


@pytest.mark.parametrize("target", ["host", "x86-avx2"])
@pytest.mark.parametrize("name, args", CASES)
def test_float16_converted_by_rows_matches_integer_conversions(name, args, target, monkeypatch):
    t = _target(target)
    task = at.Task(name, (*args, "float16"), target=t)
    src, ts, arrays, outs = _run(task, monkeypatch, convert=True)
    feature = f16c.conversion(t)[0]
    assert f"widen_{feature}_f16_" in src, "no float16 read through the conversion"
    if name in NARROWED:
        assert f"narrow_{feature}_f16_" in src, "the output not narrowed by the conversion"
    plain, _, plain_arrays, _ = _run(task, monkeypatch, convert=False)
    assert "_f16_" not in plain.replace("pt_f16_", "")
    for k in outs:  # the same float32 arithmetic, up to its fused multiply-adds
        ulps = np.abs(arrays[k].view(np.int16).astype(np.int32) - plain_arrays[k].view(np.int16))
        assert ulps.max() <= 1 and np.count_nonzero(ulps) <= ulps.size // 1000
    inputs = [arrays[i] for i in range(len(ts)) if i not in outs]
    ref = task.template.reference_output(inputs, task.args)
    names = [x.name for x in ts]
    why = Runner._compare(arrays, outs, ref, names, {"rtol": 2e-3, "atol": 2e-3})
    assert why is None, why
