"""What the subcommands share: the usage error, argument types, reading workloads."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import math
import os
import sys
import warnings

import autotune as at
from pypto.cache import cache_dir, own_dir
from pypto.dtypes import dtype as dtype_info
from pypto.errors import BuildEnvironmentError, PyptoError
from pypto.target import Target, can_run
from pypto.tensor import PlaceholderOp

from .. import store
from ..workloads import WorkloadError, place_dtype


class UsageError(Exception):
    """A bad command line: reported in one line, exit status 2."""


def positive(name: str, zero_ok: bool = False, real: bool = False, most: float | None = None):
    """An argparse type: a positive (or non-negative) int, or a finite float if ``real``,
    at most ``most`` where given (a time beyond it would overflow the clocks)."""

    def conv(text):
        try:
            v = float(text) if real else int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} takes a number, got {text!r}") from None
        if not math.isfinite(v):
            raise argparse.ArgumentTypeError(f"{name} must be a finite number, got {text}")
        if v < 0 or (v == 0 and not zero_ok):
            what = "non-negative" if zero_ok else "positive"
            raise argparse.ArgumentTypeError(f"{name} must be {what}, got {text}")
        if most is not None and v > most:
            raise argparse.ArgumentTypeError(f"{name} must be at most {most:g}, got {text}")
        return v

    return conv


# the words --args reads as Python's constants (as a string, "False" would be true)
_CONSTANTS = {"True": True, "true": True, "False": False, "false": False, "None": None}


def parse_args_list(text: str) -> list:
    """``1024,1024,1024`` -> [1024, 1024, 1024] (ints, floats, ``True``/``False``/``None``,
    or names such as a dtype)."""
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            raise UsageError(f"--args: empty value in {text!r}")
        if part in _CONSTANTS:
            out.append(_CONSTANTS[part])
            continue
        try:
            out.append(int(part))
        except ValueError:
            try:
                out.append(float(part))
            except ValueError:
                out.append(part)
    return out


def add_workload_arguments(p: argparse.ArgumentParser, target_help: str) -> None:
    """TEMPLATE, --args, --target and --import: what names a workload."""
    p.add_argument("template", help="template name (see 'pypto-tune list')")
    p.add_argument(
        "--args",
        required=True,
        help="the template's arguments, comma-separated, e.g. 64,64,64 (True, False and "
        "None as Python's)",
    )
    p.add_argument(
        "--dtype",
        default=None,
        help="element type, appended to --args (float32, float16, bfloat16, int8, ...; "
        "templates that take a dtype)",
    )
    p.add_argument("--target", default="host", help=target_help)
    add_import_argument(p)


def add_import_argument(p: argparse.ArgumentParser) -> None:
    """--import MODULE (repeatable): modules that register user templates."""
    p.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import a Python module that registers templates (repeatable)",
    )


def add_measure_arguments(p: argparse.ArgumentParser) -> None:
    """--timeout, --number, --repeat: how each candidate is measured."""
    p.add_argument(
        "--timeout",
        type=positive("--timeout", real=True, most=1e6),
        default=10.0,
        help="seconds one candidate may run before it is recorded as a timeout, counted once "
        "it is loaded (default 10)",
    )
    p.add_argument(
        "--number",
        type=positive("--number"),
        help="calls per timing repeat (default 5; 1 with --flush-cache)",
    )
    p.add_argument(
        "--repeat",
        type=positive("--repeat"),
        default=3,
        help="timing repeats per candidate (default 3)",
    )
    p.add_argument(
        "--flush-cache",
        action="store_true",
        help="evict the caches (a 64 MiB write) before each timing repeat, as TVM's "
        "enable_cpu_cache_flush: kernels are then ranked by their speed on data that "
        "arrives from memory, as inside a model, not on data a previous call left in cache",
    )
    p.add_argument(
        "--threads",
        type=positive("--threads"),
        help="run the candidates with this many threads (default: OMP_NUM_THREADS, else "
        "the cores); each record states its count, and apply_history_best prefers the "
        "records of the count parallel loops use when it runs",
    )


def measure_option(a) -> at.MeasureOption:
    """The MeasureOption of --timeout, --number, --repeat, --flush-cache and --threads."""
    number = a.number if a.number is not None else 1 if a.flush_cache else 5
    return at.MeasureOption(
        number=number, repeat=a.repeat, timeout=a.timeout, flush_cache=a.flush_cache,
        threads=a.threads,
    )  # fmt: skip


def add_ray_argument(p: argparse.ArgumentParser) -> None:
    """--ray ADDRESS: build and measure on a Ray cluster (``autotune.ray_runner``)."""
    p.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="build and measure on a Ray cluster (host:port, or 'auto'); needs the "
        "distributed extra",
    )


def _ray_installed() -> bool:
    return importlib.util.find_spec("ray") is not None


def check_ray(a) -> None:
    """Refuse ``--ray`` without ray installed, before anything else is done."""
    if a.ray and not _ray_installed():
        raise UsageError(
            f"--ray {a.ray}: ray is not installed; install the distributed extra "
            "(pip install 'pypto[distributed]')"
        )


def connect_ray(a, opt):
    """A ``RayMeasurer`` on the cluster ``--ray`` names (``UsageError`` if unreachable)."""
    ray_runner = importlib.import_module("autotune.ray_runner")  # ray only when asked for
    try:
        return ray_runner.RayMeasurer(a.ray, opt)
    except ray_runner.RayUnavailable as e:
        raise UsageError(f"--ray {a.ray}: {e}") from None


def import_modules(names) -> None:
    """Import the modules that register user templates (from the current directory too)."""
    if names and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # modules next to the user, as with python -m
    for mod in names:
        try:
            importlib.import_module(mod)
        except ImportError as e:
            raise UsageError(f"--import {mod}: {e}") from None


def target_of(name: str, must_run: bool) -> Target:
    """The target named on the command line; one this machine cannot run is refused when
    the command runs code."""
    try:
        target = Target(name)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if must_run and not can_run(target):
        said = os.environ.get("PYPTO_TARGET", "").strip()
        where = f"PYPTO_TARGET={said}" if name == "host" and said else f"--target {name}"
        raise UsageError(
            f"{where}: this machine cannot run code for {target.name} "
            "(measure it on a machine of that kind)"
        )
    return target


def task_of(ns, must_run: bool = True) -> at.Task:
    """The task that ``TEMPLATE --args ... --target ...`` names, checked before anything
    runs: a known template, arguments that fit it, a non-empty workload, a usable target."""
    import_modules(ns.imports)
    try:
        at.get_template(ns.template)
    except KeyError as e:
        raise UsageError(str(e).strip("'\"")) from None
    args = parse_args_list(ns.args)
    if getattr(ns, "dtype", None):
        args = with_dtype(ns.template, args, ns.dtype)
    target = target_of(ns.target, must_run)
    try:
        task = at.Task(ns.template, args, target=target)
        _, tensors = task.instantiate(task.config_space.default_config())
    except TypeError as e:
        raise UsageError(f"--args do not fit template {ns.template!r}: {e}") from None
    except (ValueError, OverflowError, at.SpaceError, PyptoError) as e:
        raise UsageError(f"--args {ns.args}: {e}") from None
    check_arrays(f"--args {ns.args}", tensors)
    return task


def check_arrays(label: str, tensors) -> None:
    """``UsageError`` (``label``: the workload as the user wrote it) for a workload whose
    arrays are empty or do not fit this machine's memory: nothing to measure."""
    for t in tensors:
        shape = [getattr(d, "value", None) for d in t.shape]
        if 0 in shape:
            kind = "input" if isinstance(t.op, PlaceholderOp) else "output"
            raise UsageError(
                f"{label}: an empty workload ({kind} {t.name} has shape "
                f"{tuple(shape)}); every size must be at least 1"
            )
    _check_memory(label, tensors)


def _check_memory(label: str, tensors) -> None:
    """Refuse a workload whose arrays, with the copies and the reference a measurement
    makes (about three times them), do not fit this machine's memory."""
    need = 0
    for t in tensors:
        dims = [getattr(d, "value", None) for d in t.shape]
        if all(isinstance(d, int) for d in dims):
            need += math.prod(dims) * dtype_info(t.dtype).bits // 8
    have = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if 3 * need > have:
        raise UsageError(
            f"{label}: the workload's arrays take {need / 2**30:.3g} GiB, about three "
            f"times that to measure, and this machine has {have / 2**30:.3g} GiB"
        )


def with_dtype(template: str, args: list, dtype: str) -> list:
    """``args`` with ``dtype`` at the template's ``dtype`` parameter (``place_dtype``)."""
    try:
        return list(place_dtype(template, args, dtype, given="--args"))
    except WorkloadError as e:
        raise UsageError(f"--dtype {dtype}: {e}") from None


def store_logs(*templates: str) -> list[str]:
    """The default logs of ``templates`` in the user's store, its directories private
    (``own_dir``: made 0700, the user's, written by no one else), checked as
    ``writable_log``; ``UsageError`` naming the store and what to do otherwise."""
    what = f"your tuning store ($PYPTO_HOME: {store.home()})"
    hint = "set PYPTO_HOME to a directory of your own, or pass --log FILE"
    if not os.environ.get("PYPTO_CACHE_DIR"):
        hint += " and set PYPTO_CACHE_DIR (the build cache is kept in PYPTO_HOME too)"
    try:
        for d in (store.home(), store.logs_dir()):
            own_dir(d, "the tuning store directory", hint)
    except BuildEnvironmentError as e:
        raise UsageError(str(e)) from None
    return [writable_log(store.user_log(t), what) for t in templates]


def usable_build_cache() -> None:
    """``UsageError`` when the build cache cannot be used (checked before a log is made:
    every candidate would fail to build)."""
    try:
        cache_dir()
    except BuildEnvironmentError as e:
        raise UsageError(str(e)) from None


def writable_log(path: str, what: str | None = None) -> str:
    """``path`` if a log can be appended there (checked before the first measurement);
    ``what`` names it in the message (default ``--log PATH``)."""
    usable_build_cache()
    if os.path.isdir(path):
        if what:
            raise UsageError(f"{what}: {path} is a directory, not a log file")
        raise UsageError(f"--log {path} is a directory; give a file such as {path}/log.jsonl")
    what = what or f"--log {path}"
    if os.path.exists(path) and not os.path.isfile(path):  # a pipe would be read back
        raise UsageError(f"{what}: not a regular file (a pipe or a device); the log is read "
                         "back to resume and pick the best: give a file")  # fmt: skip
    folder = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(folder):
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder):
        raise UsageError(f"{what}: {folder} is a file, not a directory")
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        if not os.path.exists(path):
            CREATED_LOGS.add(os.path.abspath(path))
        os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600))
    except OSError as e:
        raise UsageError(f"{what}: cannot write there ({e.strerror})") from None
    return path


# logs this command made to check that it can write them: those still empty when it
# fails (a cluster it could not reach, a broken compiler) are removed again
CREATED_LOGS: set = set()


def remove_empty_logs(failed: bool) -> None:
    """After a failed command, remove the logs it made and never wrote to (a command
    that succeeds keeps them: its output names them)."""
    while CREATED_LOGS:
        path = CREATED_LOGS.pop()
        if failed:
            with contextlib.suppress(OSError):
                if os.path.isfile(path) and os.path.getsize(path) == 0:
                    os.remove(path)


def load_logs(paths) -> list:
    """Records of the given logs, refused when one is missing; warnings go to stderr."""
    for path in paths:
        if os.path.isdir(path):
            raise UsageError(f"{path} is a directory, not a tuning log")
        if not os.path.isfile(path):
            raise UsageError(f"no tuning log at {path}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        recs = at.load_records(list(paths))
    for w in caught:
        print(f"warning: {w.message}", file=sys.stderr)
    return recs
