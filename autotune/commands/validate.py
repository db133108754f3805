"""``pypto-tune validate TEMPLATE --args ...``: build the template's default config and its
best recorded one (your records, then the shipped ones), run each on random inputs and
compare every output with the template's numpy reference (without one: with the default
config's outputs). Exit 1 when a config is wrong."""

from __future__ import annotations

import argparse

import numpy as np

import autotune as at
import pypto as pt
from pypto.tensor import PlaceholderOp

from .common import add_workload_arguments, positive, task_of


def add_arguments(p: argparse.ArgumentParser) -> None:
    """This subcommand's arguments."""
    add_workload_arguments(p, "hardware target (default: this host); it must run here")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument("--rtol", type=positive("--rtol", real=True), default=1e-3)
    p.add_argument("--atol", type=positive("--atol", real=True), default=1e-3)


def random_inputs(tensors, rng) -> list:
    """Random arrays for the placeholders among ``tensors`` (values in [-1, 1), or small
    integers)."""
    out = []
    for t in tensors:
        if not isinstance(t.op, PlaceholderOp):
            continue
        shape, dt = tuple(int(d.value) for d in t.shape), np.dtype(t.dtype)
        if dt.kind == "f":
            out.append(rng.uniform(-1, 1, shape).astype(dt))
        else:
            out.append(rng.integers(0, 8, shape).astype(dt))
    return out


def _outputs(task, values, inputs) -> list:
    s, tensors = task.instantiate(task.config_space.config(values))
    got = pt.build(s, tensors, target=task.target)(*inputs)
    return list(got) if isinstance(got, tuple) else [got]


def run(a: argparse.Namespace) -> int:
    """Run the subcommand on parsed arguments; returns the exit status."""
    task = task_of(a)
    _, tensors = task.instantiate(task.config_space.default_config())
    inputs = random_inputs(tensors, np.random.default_rng(a.seed))
    default = task.config_space.default_config().to_json()
    if task.template.reference is not None:
        expected, against = task.template.reference_output(inputs, task.args), "the reference"
    else:
        expected, against = _outputs(task, default, inputs), "the default config"
    with at.apply_history_best():
        ranked = at.dispatch.lookup(task.workload_key, task.target.key)
    configs = {"default config": default}
    for values in ranked:
        try:
            task.config_space.config(values)
        except at.SpaceError:
            continue  # made by another version of the template
        configs["best recorded config"] = values
        break
    wrong = 0
    for what, values in configs.items():
        errs = []
        for got, want in zip(_outputs(task, values, inputs), expected):
            want = np.asarray(want)
            ok = got.shape == want.shape and np.allclose(got, want, rtol=a.rtol, atol=a.atol)
            err = (
                np.max(np.abs(got.astype(np.float64) - want)) if got.shape == want.shape else np.inf
            )
            errs.append((ok, float(err)))
        good = all(ok for ok, _ in errs)
        wrong += not good
        worst = max(e for _, e in errs)
        print(f"{what} {values}: {'ok' if good else 'WRONG'} against {against} "
              f"(max abs error {worst:.3g})")  # fmt: skip
    if "best recorded config" not in configs:
        print(f"no recorded config for {task.workload_key} on {task.target.key}")
    return 1 if wrong else 0
