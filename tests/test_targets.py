"""Every target: the built-in templates' default configs, built for each named target,
run (natively, or under qemu with the cross compiler) and compared with their
references; spaces and defaults follow the task's target, never the host."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from test_templates import CASES, _shape

import autotune
import pypto as pt
from pypto import emulate
from pypto.target import KNOWN


@pytest.mark.parametrize("target", sorted(KNOWN))
def test_default_configs_match_references_on_every_target(target):
    """One test per target (a failure names the template): on aarch64 each kernel is
    compiled by the cross compiler and run under qemu-aarch64."""
    t = pt.Target(target)
    why = emulate.why_not_runnable(t)
    if why:
        pytest.skip(why)
    for name, args in CASES:
        task = autotune.Task(name, args, target=t)
        s, tensors = task.instantiate(task.config_space.default_config())
        mod = pt.build(s, tensors, target=t, name=name)
        rng = np.random.default_rng(0)
        inputs = [rng.standard_normal(_shape(x)).astype(x.dtype) for x in tensors[:-1]]
        out = np.full(_shape(tensors[-1]), np.nan, tensors[-1].dtype)
        mod(*inputs, out)
        (ref,) = task.template.reference_output(inputs, args)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4, err_msg=f"{name}{args}")


@pytest.mark.parametrize("target", sorted(KNOWN))
def test_spaces_and_defaults_follow_the_task_target(target):
    """The tile widths of the space are the target's lanes, whatever the host is."""
    t = pt.Target(target)
    lanes = t.vector_lanes("float32")
    mm = autotune.Task("matmul", (256, 256, 256), target=t)
    assert mm.config_space.target == t
    assert [c[-1] for c in mm.config_space.knobs["tile_j"].values] == [
        lanes * m for m in (1, 2, 3, 4)
    ]
    d = mm.config_space.default_config().values
    mr, nv = d["tile_i"][-1], d["tile_j"][-1] // lanes
    assert mr * nv + nv + 1 <= t.vector_registers  # the register tile fits
    conv = autotune.Task("conv2d_nchw", (1, 64, 56, 56, 64, 3, 3, 1, 1), target=t)
    vk = conv.config_space.default_config().values["vk_k"][-1]
    assert vk % lanes == 0
    assert ("ukernel" in conv.config_space.knobs) == (target != "generic")


def test_measuring_a_target_this_machine_cannot_run_is_refused():
    """No record is written for a target whose timings these would not be."""
    t = pt.Target("x86-avx2", features=("avx2", "fma", "no_such_feature"))
    task = autotune.Task("matmul", (16, 16, 16), target=t)
    tuner = autotune.RandomTuner(task, seed=0)
    with pytest.raises(pt.TargetError, match="cannot measure target x86-avx2 on this machine"):
        tuner.tune(2)
    assert tuner.history == []


def test_records_of_other_targets_only_warn_once_and_use_the_default():
    task = autotune.Task("matmul", (24, 24, 24))
    other = next(n for n in ("generic", "aarch64-neon") if n != task.target.key)
    rec = autotune.Record(
        task.workload_key,
        other,
        {**task.config_space.default_config().values, "unroll_k": 8},
        costs=[1e-4],
    )
    tmpl = autotune.get_template("matmul")
    with autotune.apply_history_best([rec]):
        with pytest.warns(UserWarning, match=f"for target {task.target.key} .*exist for {other}"):
            s, tensors = tmpl(24, 24, 24)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # only once
            tmpl(24, 24, 24)
    # the default config's loop nest, not the other target's record's
    ds, dt = task.instantiate(task.config_space.default_config())
    assert str(pt.lower(s, tensors, name="m")) == str(pt.lower(ds, dt, name="m"))
    rs, rt = task.instantiate(task.config_space.config(rec.config))
    assert str(pt.lower(s, tensors, name="m")) != str(pt.lower(rs, rt, name="m"))


@pytest.mark.parametrize("target", ["x86-avx2", "generic"])
def test_a_dict_of_knob_values_instantiates_on_the_task_target(target):
    """``task.instantiate(dict)`` checks the values against the task's own space (AVX2's
    8-lane tiles are not in an AVX-512 host's) and schedules for its target."""
    task = autotune.Task("matmul", (64, 64, 64), target=target)
    lanes = pt.Target(target).vector_lanes("float32")
    values = {**task.config_space.default_config().values, "tile_j": [-1, lanes]}
    s, tensors = task.instantiate(values)
    want_s, want_t = task.instantiate(task.config_space.config(values))
    assert str(pt.lower(s, tensors, name="m")) == str(pt.lower(want_s, want_t, name="m"))
    with pytest.raises(autotune.SpaceError, match="tile_j"):
        task.instantiate({**values, "tile_j": [-1, 3]})


def test_a_named_target_is_the_same_on_every_machine(monkeypatch):
    """A named target's parameters (cores included) do not depend on the machine, so its
    default configs and code do not either; ``host`` has the machine's cores."""
    import os

    from pypto import target as target_mod

    def named_with(cores):
        monkeypatch.setattr(os, "cpu_count", lambda: cores)
        target_mod._named.cache_clear()
        return pt.Target("x86-amx")

    try:
        two, many = named_with(2), named_with(64)
        assert two == many and two.cores == 1
    finally:
        monkeypatch.undo()
        target_mod._named.cache_clear()
    assert pt.Target("host").cores == (os.cpu_count() or 1)
    spaces = [
        autotune.get_template("matmul").space(128, 1024, 256, "int8", target=t) for t in (two, many)
    ]
    assert spaces[0].default_config().values == spaces[1].default_config().values


def test_generic_code_is_c99(tmp_path):
    """API.md §3: ``generic`` is portable C99: a template's kernel (temporaries,
    workspaces, OpenMP) and one with run-time index checks compile under
    ``-std=c99 -pedantic-errors`` (posix_memalign is declared for strict modes)."""
    import subprocess

    from pypto.runtime import compiler

    task = autotune.Task("conv2d_nchw", (1, 8, 16, 16, 8, 3, 3, 1, 1), target="generic")
    s, args = task.instantiate(task.config_space.default_config())
    n = pt.var("n")
    T = pt.placeholder((n,), "float32", name="T")
    X = pt.placeholder((n,), "int64", name="X")
    G = pt.compute((n,), lambda i: T[X[i]], name="G")
    sources = [
        pt.build(s, args, target="generic", emit_only=True),
        pt.build(pt.create_schedule(G.op), [T, X, G], target="generic", emit_only=True),
    ]
    for k, src in enumerate(sources):
        c = tmp_path / f"k{k}.c"
        c.write_text(src)
        flags = ["-std=c99", "-pedantic-errors", "-fopenmp", "-c", str(c), "-o", str(c) + ".o"]
        r = subprocess.run([*compiler(), *flags], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-2000:]
