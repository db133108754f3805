"""The child side of measurement: build workers, the runner, and how they end.

    build worker (pool process)  template(cfg) -> lower -> C -> cc
    runner (one child process)   template(cfg), the built object -> fresh inputs -> check, time

Replies are plain dicts: ``{"error": kind, "msg": ...}`` for the candidate's own
failure, ``{"fault": ...}`` for a broken environment (no compiler, no cache
directory: any candidate would fail the same way), which the parent turns
into ``EnvironmentFault`` instead of a record.

Every child dies with the process that started it: on Linux the kernel sends
it a signal when its parent dies (``PR_SET_PDEATHSIG``), and a watchdog
thread checks the parent's pid everywhere. A build worker that ends kills
the compiler it is waiting for (its whole process group) first, so neither
SIGINT, SIGTERM nor SIGKILL of ``pypto-tune`` leaves workers or compilers behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import os
import signal
import sys
import threading
import time
import traceback

import numpy as np

import pypto as pt
from pypto import dtypes
from pypto.arg_checks import aligned_empty
from pypto.cache import Entry
from pypto.codegen_c import codegen
from pypto.dtypes import numpy_dtype
from pypto.errors import CompilerKilled
from pypto.expr import tensor_reads
from pypto.module import Module, Signature
from pypto.runtime import compile_source, kill_compilers
from pypto.target import Target
from pypto.tensor import PlaceholderOp
from pypto.validate import ValidationReport, compare_one, tolerances

from .records import ErrorKind
from .task import get_template

_PR_SET_PDEATHSIG = 1


def short_error(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}"
    return text if len(text) < 2000 else text[:2000] + " ..."


def _fault(e: pt.BuildEnvironmentError) -> dict:
    """A one-line reply for a broken environment: its cause and the compiler's first
    line of complaint (the candidate's source path says nothing about it)."""
    said = next((line.strip() for line in (e.stderr or "").splitlines() if line.strip()), "")
    return {"fault": e.args[0] + (f"; the compiler said: {said[:300]}" if said else "")}


class TemplateNotHere(Exception):
    """The worker process cannot find the template: a broken set-up, not a candidate's
    failure (every config would fail the same way)."""


def _load_template(spec):
    mod = spec["module"]
    if mod not in ("__main__", "__mp_main__"):
        importlib.import_module(mod)  # registers the template in this process
    try:
        return get_template(spec["template"])
    except KeyError:
        raise TemplateNotHere(
            f"template {spec['template']!r} is not registered in the worker processes, "
            f"which import module {mod!r} afresh: define it at the top level of a module "
            "(or of the script), not inside a function or under "
            "`if __name__ == '__main__':`"
        ) from None


# ---------------------------------------------------------------- ending with the parent


def _end_now(code: int = 143) -> None:
    kill_compilers()
    os._exit(code)


def die_with_parent(parent_pid: int, sig: int = signal.SIGTERM) -> None:
    """End this process (killing its compilers) when ``parent_pid`` is gone."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if sig == signal.SIGTERM:
        signal.signal(signal.SIGTERM, lambda *_: _end_now())
    if os.getppid() != parent_pid:  # it died before the signal was armed
        _end_now()

    def watch():
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        _end_now()

    threading.Thread(target=watch, name="pypto-parent-watch", daemon=True).start()


def widen_affinity(cpus: frozenset[int] | None) -> frozenset[int] | None:
    """Let this child run on ``cpus`` (``pypto.runtime.cpus_for_workers``), before it
    starts OpenMP: it inherited its parent's thread, which ``OMP_PROC_BIND`` bound to one
    CPU, and the runner's threads would share that one and the build workers' compilers
    too. Returns the CPUs it may run on now, which OpenMP spreads its threads over."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    if cpus and os.sched_getaffinity(0) != cpus:
        with contextlib.suppress(OSError):  # the CPUs left the cgroup since: keep ours
            os.sched_setaffinity(0, cpus)
    return frozenset(os.sched_getaffinity(0))


def init_build_worker(parent_pid: int, cpus: frozenset[int] | None = None) -> None:
    """Pool initializer: SIGTERM (also sent when the parent dies) kills the compiler the
    worker waits for, then the worker; SIGINT is the parent's to handle."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(parent_pid, signal.SIGTERM)
    widen_affinity(cpus)


def probe_worker() -> int:
    """A no-op job: a pool that cannot run it cannot build anything."""
    return os.getpid()


# ---------------------------------------------------------------- building (pool workers)


class _OverTime(Exception):
    """A build's Python part outlived its time limit."""


@contextlib.contextmanager
def _time_limit(seconds: float):
    """Raise ``_OverTime`` in this (main) thread after ``seconds``; elsewhere (a thread of
    a Ray worker) no limit, the driver's deadline still holds."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(*_):
        raise _OverTime

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def build_worker(spec: dict) -> dict:
    """Instantiate and compile one candidate; returns a dict of plain data (with the
    path of the object in this machine's cache)."""
    t0 = time.perf_counter()
    limit = spec["build_timeout"]
    try:
        with _time_limit(limit):  # the template's own Python and the lowering count too
            tpl = _load_template(spec)
            s, tensors = tpl.instantiate(spec["config"], *spec["args"], target=spec["target"])
            func = pt.lower(s, tensors, name="candidate")
    except TemplateNotHere as e:
        return {"fault": str(e)}
    except _OverTime:
        return {"error": ErrorKind.TIMEOUT.value, "msg": f"build took longer than {limit:.0f} s"}
    except BaseException as e:  # noqa: BLE001 - the candidate's error (its sys.exit too)
        return {"error": ErrorKind.INSTANTIATION.value, "msg": short_error(e)}
    try:
        target = Target(spec["target"])
        src, cname = codegen(func, target)
        left = max(1.0, limit - (time.perf_counter() - t0))
        so = compile_source(src, target.cflags, timeout=left)
        loadable = {"cname": cname, "signature": Signature.of(func, cname).to_json()}
    except pt.BuildEnvironmentError as e:
        return _fault(e)
    except CompilerKilled as e:  # tried once more, alone (``Measurer.build``)
        return {"error": ErrorKind.COMPILE.value, "msg": short_error(e)[:4000], "retry": True}
    except pt.BuildError as e:
        return {"error": ErrorKind.COMPILE.value, "msg": short_error(e)[:4000]}
    except Exception as e:  # noqa: BLE001
        return {"error": ErrorKind.COMPILE.value, "msg": short_error(e)}
    return {"build_s": time.perf_counter() - t0, "so": so, **loadable}


def loadable(built: dict) -> dict:
    """What a runner needs of a build to load its object without lowering it again:
    the object's cache key, its C name and signature (nothing for a failed build)."""
    if "so" not in built and "object" not in built:
        return {}
    key = built["object"][0] if "object" in built else os.path.basename(built["so"])[:-3]
    return {"object_key": key, "cname": built["cname"], "signature": built["signature"]}


def _built_module(spec: dict):
    """The candidate's module from the build cache, by the key its build gave (no
    lowering again: matmul 96^3's run went from 20-30 ms to the kernel's few); None
    where the spec has no key or the entry is gone (then it is built again, a cache
    hit)."""
    if "object_key" not in spec:
        return None
    path = Entry(spec["object_key"]).lookup()
    if path is None:
        return None
    sig = Signature.from_json(spec["signature"])
    return Module(None, "", spec["cname"], path, Target(spec["target"]), signature=sig)


# ---------------------------------------------------------------- running (the runner child)


def _index_bounds(tensors) -> dict:
    """Input tensor -> the smallest dimension its values index (``X[tok[s], c]``: tok
    indexes X's rows), over every definition the outputs are computed from."""
    out, seen = {}, set()
    todo = [t.op for t in tensors if not isinstance(t.op, PlaceholderOp)]
    while todo:
        op = todo.pop()
        if id(op) in seen or isinstance(op, PlaceholderOp):
            continue
        seen.add(id(op))
        todo += [t.op for t in op.input_tensors]
        updates = getattr(op, "updates", ())
        exprs = [*getattr(op, "bodies", ()), *(e for lhs, val, _ in updates for e in (*lhs, val))]
        for read in (r for e in exprs for r in tensor_reads(e)):
            for d, idx in zip(read.tensor.shape, read.indices):
                for inner in tensor_reads(idx):
                    key = id(inner.tensor)
                    out[key] = min(out.get(key, 1 << 62), int(getattr(d, "value", 1 << 62)))
    return out


def _random_inputs(tensors, rng):
    arrays, outputs = [], []
    bounds = _index_bounds(tensors)
    for t in tensors:
        shape = tuple(int(d.value) for d in t.shape)
        dt = numpy_dtype(t.dtype)
        floating = dtypes.dtype(t.dtype).is_float
        if isinstance(t.op, PlaceholderOp):
            if floating:
                arrays.append(rng.uniform(-1, 1, shape).astype(dt))
            elif dt.kind in "iu":  # indices within what they index
                arrays.append(
                    rng.integers(0, max(1, min(8, bounds.get(id(t), 8))), shape).astype(dt)
                )
            else:
                arrays.append(np.zeros(shape, dt))
        else:
            arrays.append(np.full(shape, np.nan, dt) if floating else np.zeros(shape, dt))
            outputs.append(len(arrays) - 1)
    return arrays, outputs


GUARD = 4096  # canary bytes on each side of every argument a candidate gets
CANARY = 0xA5


class Guarded:
    """``a`` copied to a cache-line-aligned place between two ``GUARD``-byte canaries:
    a candidate's hand-written kernel (a tensor intrinsic) writing past an argument's
    end or before its start changes them (pypto's own loops are proven in bounds)."""

    def __init__(self, a: np.ndarray):
        self.n = a.nbytes
        self.buf = aligned_empty((self.n + 2 * GUARD,), np.uint8)
        self.buf[:] = CANARY
        self.array = self.buf[GUARD : GUARD + self.n].view(a.dtype).reshape(a.shape)
        self.array[...] = a

    def overrun(self) -> str | None:
        """Where the canaries changed (bytes past the end, before the start), else None."""
        after = np.flatnonzero(self.buf[GUARD + self.n :] != CANARY)
        before = np.flatnonzero(self.buf[:GUARD] != CANARY)
        where = [f"{after[-1] + 1} byte(s) past its end"] if after.size else []
        where += [f"{GUARD - before[0]} byte(s) before its start"] if before.size else []
        return " and ".join(where) or None


def _overran(guarded, names) -> dict | None:
    for i, g in enumerate(guarded):
        where = g.overrun()
        if where:
            return {
                "error": ErrorKind.RUNTIME.value,
                "msg": f"wrote outside argument {names[i]} (argument {i}): {where}",
            }
    return None


def _same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    return np.array_equal(a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8))


class Runner:
    """State of the runner child: pristine inputs and expected outputs per workload.

    Each candidate runs on fresh copies of the pristine arrays, so a candidate that
    writes its inputs harms no other; it is caught by comparing its inputs with the
    pristine ones after its runs, and recorded as a wrong answer."""

    def __init__(self, cpus: frozenset[int] | None = None):
        self.cases: dict = {}
        self.flush_buf = None
        self.cpus = cpus  # read before OpenMP started: it binds this thread to one

    def case(self, spec, tpl, tensors, seed):
        key = spec["workload"]
        if key not in self.cases:
            rng = np.random.default_rng(seed)
            arrays, outs = _random_inputs(tensors, rng)
            inputs = [a for i, a in enumerate(arrays) if i not in outs]
            if tpl.reference is not None:
                ref = tpl.reference_output([a.copy() for a in inputs], spec["args"])
            else:  # the default config's outputs, or the definition's, unscheduled
                if spec.get("plain_reference"):
                    s, ts = pt.create_schedule([tensors[i].op for i in outs]), tensors
                else:
                    space = tpl.space(*spec["args"], target=spec["target"])
                    s, ts = tpl.instantiate(space.default_config(), *spec["args"])
                mod = pt.build(s, ts, target=spec["target"], name="reference")
                scratch = [a.copy() for a in arrays]
                mod(*scratch)
                ref = [scratch[i] for i in outs]
            names = [t.name for t in tensors]
            self.cases[key] = (arrays, outs, [np.asarray(r) for r in ref], names)
        return self.cases[key]

    def prepare(self, spec: dict, opt: dict) -> dict:
        """Inputs and expected outputs of a workload, outside any candidate's timeout."""
        tpl = _load_template(spec)
        if spec.get("plain_reference"):  # the default config failed: the candidate's tensors
            _, tensors = tpl.instantiate(spec["config"], *spec["args"], target=spec["target"])
        else:
            space = tpl.space(*spec["args"], target=spec["target"])
            _, tensors = tpl.instantiate(space.default_config(), *spec["args"])
        self.case(spec, tpl, tensors, opt["seed"])
        return {"prepared": True}

    def flush(self):
        if self.flush_buf is None:
            self.flush_buf = np.zeros(64 * 1024 * 1024 // 8)
        self.flush_buf += 1.0

    @staticmethod
    def _wrote_input(arrays, pristine, outs, names) -> dict | None:
        for i, (a, p) in enumerate(zip(arrays, pristine)):
            if i not in outs and not _same_bytes(a, p):
                return {
                    "error": ErrorKind.WRONG_ANSWER.value,
                    "msg": f"wrote to input {names[i]} (argument {i})",
                }
        return None

    @staticmethod
    def _compare(arrays, outs, ref, names, opt, atol_scale=0.0) -> dict | None:
        """A wrong answer (how many elements, the largest error, the first index) or None:
        ``pt.validate``'s comparison, float outputs with the measurement's tolerances or
        their dtype's (``pt.validate``'s defaults), whichever is looser; the absolute one
        in units of the largest |reference| where that is below 1 (softmax's rows of 4096
        are all under 1e-3: a kernel writing zeros passed an absolute 1e-3), plus
        ``atol_scale`` (a number, or one per output dtype) x the largest |reference|;
        integer outputs exactly."""
        checks = []
        for i, r in zip(outs, ref):
            tol = (None, None)
            dt = arrays[i].dtype.name
            if arrays[i].dtype.kind == "f" or dt == "bfloat16":
                scale = atol_scale.get(dt, 0.0) if isinstance(atol_scale, dict) else atol_scale
                mag = np.abs(np.asarray(r, np.float64))
                big = float(np.where(np.isfinite(mag), mag, 0.0).max(initial=0.0))
                d_rtol, d_atol = tolerances(dt)
                unit = min(1.0, big) if big > 0 else 1.0
                tol = (max(opt["rtol"], d_rtol), max(opt["atol"], d_atol) * unit + scale * big)
            try:
                checks.append(compare_one(arrays[i], r, names[i], *tol))
            except ValueError as e:  # a shape the reference does not have
                return {"error": ErrorKind.WRONG_ANSWER.value, "msg": str(e)}
        report = ValidationReport(tuple(checks))
        if report.ok:
            return None
        return {
            "error": ErrorKind.WRONG_ANSWER.value,
            "msg": f"differs from the reference: {report.summary()}",
        }

    def run(self, spec: dict, opt: dict, loaded=None) -> dict:
        """Load the built object (by its key; no lowering), run once on fresh inputs,
        check, then time one candidate. ``loaded()`` is called once the template has
        been instantiated and the module loaded: the run's timeout counts from there."""
        t0 = time.perf_counter()
        if opt.get("threads"):
            pt.set_num_threads(opt["threads"])
        try:
            tpl = _load_template(spec)
            s, tensors = tpl.instantiate(spec["config"], *spec["args"], target=spec["target"])
            mod = _built_module(spec) or pt.build(
                s, tensors, target=spec["target"], name="candidate"
            )
        except pt.BuildEnvironmentError as e:
            return _fault(e)
        except TemplateNotHere as e:
            return {"fault": str(e)}
        except pt.BuildError as e:
            return {"error": ErrorKind.COMPILE.value, "msg": short_error(e)}
        except Exception as e:  # noqa: BLE001
            return {"error": ErrorKind.INSTANTIATION.value, "msg": short_error(e)}
        if loaded is not None:
            loaded()
        t_loaded = time.perf_counter()
        crowded = _oversubscribed(self.cpus)
        if crowded:
            return {"fault": crowded}
        try:
            pristine, outs, ref, names = self.case(spec, tpl, tensors, opt["seed"])
            # no earlier candidate touched these; each starts on a cache line, as the
            # outputs a module allocates and torch's tensors do (numpy's own start 16
            # bytes into one: streamed rows then ran a layernorm 1.6x slower)
            guarded = [Guarded(a) for a in pristine]
            arrays = [g.array for g in guarded]
            mod(*arrays)
            bad = _overran(guarded, names) or self._wrote_input(arrays, pristine, outs, names)
            if bad is None and opt["check_correctness"]:
                bad = self._compare(arrays, outs, ref, names, opt, tpl.atol_scale)
            if bad is not None:
                return bad
            costs = []
            ev = mod.time_evaluator(
                number=opt["number"], repeat=1, min_repeat_ms=opt["min_repeat_ms"]
            )
            for _ in range(opt["repeat"]):
                if opt["flush_cache"]:
                    self.flush()
                costs.append(ev(*arrays).results[0])
            bad = _overran(guarded, names) or self._wrote_input(arrays, pristine, outs, names)
            if bad is not None:
                return bad
        except Exception as e:  # noqa: BLE001
            return {"error": ErrorKind.RUNTIME.value, "msg": short_error(e)}
        now = time.perf_counter()  # ran_s: what the run's timeout bounds
        return {"costs": costs, "run_s": now - t0, "ran_s": now - t_loaded,
                "threads": pt.get_num_threads()}  # fmt: skip


def _oversubscribed(cpus: frozenset[int] | None) -> str:
    """Why this process's timings would be time-sliced: its kernels use more threads
    than the CPUs it may run on (``taskset``), else ""."""
    threads = pt.get_num_threads()
    n_cpus = len(cpus) if cpus else threads
    if threads <= n_cpus:
        return ""
    return (
        f"the measuring process may run on {n_cpus} CPU(s) but its kernels use {threads} "
        "threads, so their timings would be time-sliced (taskset, or OMP_PROC_BIND set "
        "as OpenMP started before pypto was imported, pinned it?): widen the affinity, "
        f"or measure with --threads {n_cpus}"
    )


def runner_main(conn, parent_pid: int, cpus: frozenset[int] | None = None):
    """The runner child's loop: ``("run"|"prepare", spec, opt)`` in, ``("done", dict)`` out
    (a run first says ``("loaded", None)`` when its candidate is ready to run)."""
    die_with_parent(parent_pid, signal.SIGKILL)  # a candidate may hang in C: no handler runs
    cpus = widen_affinity(cpus)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ["PYPTO_MEASURING"] = "1"
    runner = Runner(cpus)
    conn.send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg[0] == "stop":
            return
        kind, spec, opt = msg
        try:
            if kind == "run":
                out = runner.run(spec, opt, loaded=lambda: conn.send(("loaded", None)))
            else:
                out = runner.prepare(spec, opt)
        except pt.BuildEnvironmentError as e:
            out = _fault(e)
        except TemplateNotHere as e:
            out = {"fault": str(e)}
        except Exception:  # noqa: BLE001 - never let the loop die on a bug
            out = {"error": ErrorKind.UNKNOWN.value, "msg": traceback.format_exc()[-2000:]}
        conn.send(("done", out))
