"""``pypto-tune validate TEMPLATE --args ...``: build the template's default config and its
best recorded one (your records, then the shipped ones), run each on random inputs and
compare every output with the template's numpy reference (without one: with the default
config's outputs) through ``pt.validate``, printing its report (errors, ULP histogram,
mismatches). Tolerances default to the outputs' dtypes (``pypto.validate.TOLERANCES``).
Exit 1 when a config is wrong."""

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
    p.add_argument(
        "--seed", type=positive("--seed", zero_ok=True), default=0, help="seed of the random inputs"
    )
    p.add_argument(
        "--rtol",
        type=positive("--rtol", zero_ok=True, real=True),
        default=None,
        help="relative tolerance (default: by output dtype; integers exact)",
    )
    p.add_argument(
        "--atol",
        type=positive("--atol", zero_ok=True, real=True),
        default=None,
        help="absolute tolerance (default: by output dtype; integers exact)",
    )


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


def _module(task, values):
    s, tensors = task.instantiate(task.config_space.config(values))
    return pt.build(s, tensors, target=task.target)


def _outputs(task, values, inputs) -> list:
    got = _module(task, values)(*inputs)
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
        ranked = at.dispatch.lookup(task.template.spellings(task.args), task.record_keys)
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
        mod = _module(task, values)
        try:
            report = pt.validate(mod, lambda *_: expected, inputs, rtol=a.rtol, atol=a.atol)
        except ValueError as e:  # outputs the reference does not have
            wrong += 1
            print(f"{what} {values}: WRONG against {against} ({e})")
            continue
        wrong += not report.ok
        print(f"{what} {values}: {'ok' if report.ok else 'WRONG'} against {against} "
              f"(max abs error {report.max_abs_err:.3g})")  # fmt: skip
        print("  " + str(report).replace("\n", "\n  "))
    if "best recorded config" not in configs:
        print(f"no recorded config for {task.workload_key} on {task.target.key}")
    return 1 if wrong else 0
