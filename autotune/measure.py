"""Measurement: build candidates in parallel, run each in an isolated process.

    builders (a process pool)     template(cfg) -> lower -> C -> cc       (fills the object cache)
    runner (one child process)    template(cfg), the built object -> check -> time

The runner is a long-lived child; a candidate that crashes it (a segfault)
or outlives the timeout (an endless loop) is recorded as an error, the
runner is replaced, and tuning goes on. Each candidate runs on fresh copies
of the workload's inputs, and its output is checked against the template's
numpy reference (or the default config's output), so a fast wrong kernel,
or one that writes its inputs, is an error, never a record. Runs are
sequential: timings do not share the machine with other candidates.

A config is disqualified only by its own reproducible failure. A broken
environment -- no working compiler, an unusable cache directory, build or
measurement processes that cannot start -- raises ``EnvironmentFault``: any
candidate would fail the same way, so the run stops and no record blames a
config. A build process that dies, or a runner that crashes, is tried again
once before the candidate is blamed. (The child side is ``workers.py``.)
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import multiprocessing as mp
import os
import signal
import threading
import time
from dataclasses import dataclass, field

from pypto.errors import TargetError
from pypto.runtime import cpus_for_workers
from pypto.target import Target

from .records import ErrorKind, Measured
from .workers import (
    build_worker,
    init_build_worker,
    loadable,
    probe_worker,
    runner_main,
    short_error,
)

__all__ = ["EnvironmentFault", "ErrorKind", "MeasureOption", "MeasureResult", "Measurer"]


class EnvironmentFault(RuntimeError):
    """Measuring cannot go on for a reason that is no candidate's: ``done`` holds the
    results of the batch's configs measured before it (in order)."""

    def __init__(self, message: str, done: list | None = None):
        super().__init__(message)
        self.done = list(done or [])


@contextlib.contextmanager
def _children_ignore_sigint():
    """Processes started inside it ignore SIGINT from birth (a disposition a new
    interpreter inherits): a terminal's Ctrl-C goes to the whole process group, and one
    arriving while a child still imports printed its traceback beside the tuner's own
    one-line "interrupted". Only the main thread may set it; elsewhere, no change."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_DFL if old is None else old)


@dataclass
class MeasureOption:
    """How candidates are measured. ``timeout`` bounds one candidate's run (seconds),
    from when the runner has it loaded (instantiating the template there is bounded
    by ``build_timeout``)."""

    number: int = 5  # calls per repeat (their mean is one cost)
    repeat: int = 3  # costs per candidate (records keep all; the median ranks)
    min_repeat_ms: float = 0.0  # grow ``number`` until a repeat lasts this long
    timeout: float = 10.0
    build_timeout: float = 60.0  # one candidate's lowering + C compile
    n_parallel: int | None = None  # build processes (default: the number of cores)
    flush_cache: bool = False  # evict caches before each repeat
    check_correctness: bool = True
    rtol: float = 1e-3
    atol: float = 1e-3
    seed: int = 0
    threads: int | None = None  # candidates run with this many threads (None: OpenMP's default)

    def __post_init__(self):
        """``ValueError`` naming the field for an option that would blame every config
        (``number=0`` failed each run; ``repeat=0`` wrote records without costs)."""
        counts = {"number": self.number, "repeat": self.repeat}
        for name in ("n_parallel", "threads"):
            if getattr(self, name) is not None:
                counts[name] = getattr(self, name)
        for name, v in counts.items():
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(
                    f"MeasureOption.{name} must be a whole number of at least 1, got {v!r}"
                )
        spans = {"timeout": self.timeout, "build_timeout": self.build_timeout}
        for name, v in spans.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 or v != v:
                raise ValueError(
                    f"MeasureOption.{name} must be a positive number of seconds, got {v!r}"
                )
        rest = {"min_repeat_ms": self.min_repeat_ms, "rtol": self.rtol, "atol": self.atol}
        for name, v in rest.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
                raise ValueError(f"MeasureOption.{name} must be a number of at least 0, got {v!r}")


@dataclass
class MeasureResult(Measured):
    costs: list = field(default_factory=list)
    error: ErrorKind | None = None
    error_msg: str = ""
    build_s: float = 0.0
    run_s: float = 0.0
    ts: float = field(default_factory=time.time)
    threads: int = 0  # the threads the candidate ran with (0: not known)


def result_of(built: dict, ran: dict) -> MeasureResult:
    """The result of a candidate from its build's and its run's reports."""
    if "error" in ran:
        return MeasureResult(
            error=ErrorKind(ran["error"]), error_msg=ran["msg"], build_s=built["build_s"]
        )
    return MeasureResult(
        costs=ran["costs"], build_s=built["build_s"], run_s=ran["run_s"],
        threads=ran.get("threads", 0),
    )  # fmt: skip


def candidate_specs(task, configs, option: MeasureOption) -> list[dict]:
    """What a build or run of each config needs, as plain data (sent to other processes,
    or to other machines)."""
    return [{**_spec(task, c), "build_timeout": option.build_timeout} for c in configs]


def _spec(task, cfg) -> dict:
    return {
        "module": task.template.module,
        "template": task.name,
        "args": list(task.args),
        "config": cfg.to_json() if hasattr(cfg, "to_json") else dict(cfg),
        "target": task.target.name,
        "workload": task.workload_key,
    }


# ---------------------------------------------------------------- the parent side


class Measurer:
    """Builds candidates in a process pool and runs them in a replaceable child."""

    def __init__(self, option: MeasureOption | None = None):
        self.option = option or MeasureOption()
        self.ctx = mp.get_context("spawn")
        self.pool = None
        self.proc = None
        self.conn = None
        self.plain_reference: set = set()  # workloads whose default config cannot serve

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """End the runner and the build workers (each kills the compiler it waits for)."""
        self._stop_runner()
        self._drop_pool()

    # ---- building

    @property
    def n_workers(self) -> int:
        return self.option.n_parallel or os.cpu_count() or 1

    def _submit(self, fn, *args) -> cf.Future:
        """``fn(*args)`` on a build worker; one the pool starts for it is born ignoring
        Ctrl-C (``_children_ignore_sigint``)."""
        pool = self._pool()
        with _children_ignore_sigint():
            return pool.submit(fn, *args)

    def _pool(self, n: int | None = None):
        if self.pool is None:
            self.pool = cf.ProcessPoolExecutor(
                max_workers=n or self.n_workers,
                mp_context=self.ctx,
                initializer=init_build_worker,
                initargs=(os.getpid(), cpus_for_workers()),
            )
        return self.pool

    def _drop_pool(self):
        """Shut the pool down now: SIGTERM first (a worker then kills its compiler's
        process group), SIGKILL for any worker still there a moment later."""
        if self.pool is None:
            return
        procs = list((getattr(self.pool, "_processes", None) or {}).values())
        self.pool.shutdown(wait=False, cancel_futures=True)
        for p in procs:
            try:
                p.terminate()
            except (OSError, AttributeError):
                pass
        deadline = time.monotonic() + 2.0
        for p in procs:
            try:
                p.join(max(0.0, deadline - time.monotonic()))
                if p.is_alive():
                    p.kill()
                    p.join(1.0)
            except (OSError, AttributeError, ValueError):
                pass
        self.pool = None

    def _collect(self, futures, waves: int) -> tuple[list, list]:
        """Results of ``futures`` (None where the build did not finish) and, for those,
        ``(index, error dict)``: a stuck pool (TIMEOUT) or a dead build process."""
        # each compile stops itself at build_timeout; this is the backstop for a stuck worker
        deadline = time.monotonic() + (self.option.build_timeout + 30) * waves
        out, lost = [], []
        for k, f in enumerate(futures):
            try:
                out.append(f.result(timeout=max(0.1, deadline - time.monotonic())))
                continue
            except cf.TimeoutError:
                kind = ErrorKind.TIMEOUT
                msg = f"build took longer than {self.option.build_timeout:.0f} s"
            except Exception as e:  # noqa: BLE001 - a dead worker, a pool that cannot start
                kind = ErrorKind.INSTANTIATION
                msg = f"the build process died building it: {short_error(e)}"
            out.append(None)
            lost.append((k, {"error": kind.value, "msg": msg}))
        return out, lost

    def _check_pool_starts(self, why: str):
        """``EnvironmentFault`` unless a fresh pool runs a no-op job."""
        try:
            self._submit(probe_worker).result(timeout=120)
        except Exception as e:  # noqa: BLE001
            self._drop_pool()
            raise EnvironmentFault(
                f"the build processes cannot start ({why}; a no-op job failed too: "
                f"{short_error(e)}); is the main module importable in a fresh interpreter?"
            ) from None

    def build(self, specs) -> list[dict]:
        futures = [self._submit(build_worker, s) for s in specs]
        out, lost = self._collect(futures, -(-len(specs) // self.n_workers))
        if lost:
            self._drop_pool()  # stuck or broken: a fresh one for the retries
        for k, first in lost:
            # the pool broke or stalled: maybe this candidate's doing, maybe another's, maybe
            # the machine's; it is blamed only if it fails alone in a fresh pool again
            self._check_pool_starts(first["msg"])
            again, lost_again = self._build_alone(specs[k])
            out[k] = dict(again, msg=again["msg"] + " (twice)") if lost_again else again
        for k, r in enumerate(out):
            if r.pop("retry", False):  # its compiler was killed: maybe for memory others used
                again, _ = self._build_alone(specs[k])
                if again.pop("retry", False):
                    again["msg"] += " (twice, the second time alone)"
                out[k] = again
        for r in out:
            if "fault" in r:
                raise EnvironmentFault(f"cannot build candidates: {r['fault']}")
        return out

    def _build_alone(self, spec) -> tuple[dict, bool]:
        """One candidate built again, alone: its result, and whether the pool lost it
        again (then the pool is replaced and the result says why)."""
        (again,), failed = self._collect([self._submit(build_worker, spec)], 1)
        if failed:
            self._drop_pool()
            return dict(failed[0][1]), True
        return again, False

    # ---- running

    def _start_runner(self):
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(
            target=runner_main, args=(child, os.getpid(), cpus_for_workers()), daemon=True
        )
        try:
            with _children_ignore_sigint():
                proc.start()
        except OSError as e:
            raise EnvironmentFault(f"cannot start the measurement process: {e}") from None
        child.close()
        try:
            if not parent.poll(120):
                raise EOFError
            parent.recv()
        except (EOFError, OSError):
            proc.kill()
            proc.join(5)
            parent.close()
            raise EnvironmentFault(
                f"the measurement process could not start (exit code {proc.exitcode}); "
                "is the main module importable in a fresh interpreter?"
            ) from None
        self.proc, self.conn = proc, parent
        self.prepared: set = set()

    def _stop_runner(self, kill: bool = False):
        if self.proc is None:
            return
        try:
            if not kill:
                self.conn.send(("stop",))
                self.proc.join(2)
        except (OSError, BrokenPipeError):
            pass
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)
        self.conn.close()
        self.proc = self.conn = None

    def run(self, spec: dict) -> dict:
        """Run one built candidate; a crash of the runner is tried once more in a fresh
        runner before the candidate is blamed for it."""
        for attempt in (1, 2):
            if self.proc is None or not self.proc.is_alive():
                self._stop_runner(kill=True)
                self._start_runner()
            o = self.option
            if spec["workload"] not in self.prepared:  # the reference is not the candidate's time
                self._prepare(spec)
            r = self._exchange("run", spec, o.timeout)
            if "fault" in r:
                raise EnvironmentFault(f"cannot run candidates: {r['fault']}")
            if not r.pop("crashed", False):
                return r
            if attempt == 2:
                r["msg"] += " (twice)"
        return r

    def _prepare(self, spec: dict) -> None:
        """Inputs and reference outputs of the candidate's workload in the runner: the
        template's numpy reference, else its default config's outputs, else (that config
        fails or crashes) its definition run unscheduled."""
        key, limit = spec["workload"], max(300.0, 10 * self.option.timeout)
        plain = key in self.plain_reference
        r = self._exchange("prepare", {**spec, "plain_reference": plain}, limit)
        if ("error" in r or r.get("crashed")) and not plain:
            self.plain_reference.add(key)
            if self.proc is None or not self.proc.is_alive():
                self._start_runner()
            first = r["msg"]
            r = self._exchange("prepare", {**spec, "plain_reference": True}, limit)
            if "msg" in r:
                r["msg"] += f" (and the default config's outputs: {first})"
        if "error" in r or "fault" in r or r.get("crashed"):
            raise EnvironmentFault(
                f"cannot measure workload {key}: preparing its inputs and reference "
                f"failed: {r.get('fault') or r['msg']}"
            )
        self.prepared.add(key)

    def _exchange(self, kind: str, spec: dict, timeout: float) -> dict:
        o = self.option
        opt = {
            "number": o.number,
            "repeat": o.repeat,
            "min_repeat_ms": o.min_repeat_ms,
            "flush_cache": o.flush_cache,
            "check_correctness": o.check_correctness,
            "rtol": o.rtol,
            "atol": o.atol,
            "seed": o.seed,
            "threads": o.threads,
        }
        # a run's timeout starts when its candidate is loaded: the template's Python
        # (instantiating the schedule) is bounded by the build's limit instead
        limit, what = (
            (o.build_timeout, "loading the candidate") if kind == "run" else (timeout, kind)
        )
        try:
            self.conn.send((kind, spec, opt))
            while self.conn.poll(limit):
                tag, body = self.conn.recv()
                if tag == "loaded":
                    limit, what = timeout, kind
                    continue
                if kind == "run" and body.get("ran_s", 0.0) > timeout:  # (read late)
                    return {
                        "error": ErrorKind.TIMEOUT.value,
                        "msg": f"the run took {body['ran_s']:.3g} s, longer than {timeout:g} s",
                    }
                return body
            self._stop_runner(kill=True)
            return {
                "error": ErrorKind.TIMEOUT.value,
                "msg": f"the {what} took longer than {limit:g} s",
            }
        except (EOFError, OSError, BrokenPipeError):
            code = None
            if self.proc is not None:
                self.proc.join(5)  # reap it, so its exit status is known
                code = self.proc.exitcode
            self._stop_runner(kill=True)
            if code is not None and code < 0:
                try:
                    how = signal.Signals(-code).name
                except ValueError:
                    how = f"signal {-code}"
                msg = f"the candidate crashed the measurement process ({how})"
            else:
                msg = f"the measurement process died (exit code {code})"
            return {"error": ErrorKind.RUNTIME.value, "msg": msg, "crashed": True}

    def measure(self, task, configs) -> list[MeasureResult]:
        """Build all candidates in parallel, then run them one at a time.
        ``EnvironmentFault`` (with the results measured before it) when the environment
        breaks; no result then blames a config for it."""
        check_measurable(task.target)
        specs = candidate_specs(task, configs, self.option)
        built = self.build(specs)
        results = []
        for spec, b in zip(specs, built):
            if "error" in b:
                results.append(MeasureResult(error=ErrorKind(b["error"]), error_msg=b["msg"]))
                continue
            try:
                r = self.run({**spec, **loadable(b)})
            except (EnvironmentFault, KeyboardInterrupt) as e:  # Ctrl-C: log what finished
                e.done = results
                raise
            results.append(result_of(b, r))
        return results


def check_measurable(target) -> None:
    """Refuse, before anything is built, to measure code this machine cannot run: its
    records would be keyed by a target whose timings they are not."""
    if not target.can_run():
        raise TargetError(
            f"cannot measure target {target.name} on this machine (its CPU runs "
            f"{Target('host').name}); build it with pt.build(..., emit_only=True), or tune "
            "on a machine of that target"
        )


def measure(task, configs, option: MeasureOption | None = None) -> list[MeasureResult]:
    """Measure configs of a task once (a Measurer for a single batch)."""
    with Measurer(option) as m:
        return m.measure(task, configs)
