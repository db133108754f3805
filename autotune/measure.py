"""Measurement: build candidates in parallel, run each in an isolated process.

    builders (a process pool)     template(cfg) -> lower -> C -> cc       (fills the object cache)
    runner (one child process)    template(cfg) -> build (cache hit) -> check -> time

The runner is a long-lived child; a candidate that crashes it (a segfault)
or outlives the timeout (an endless loop) is recorded as an error, the
runner is replaced, and tuning goes on. Each candidate's output is checked
against the template's numpy reference (or the default config's output),
so a fast wrong kernel is an error, never a record. Runs are sequential:
timings do not share the machine with other candidates.
"""

from __future__ import annotations

import concurrent.futures as cf
import enum
import importlib
import multiprocessing as mp
import os
import signal
import time
import traceback
from dataclasses import dataclass, field

import numpy as np

from pypto.errors import TargetError
from pypto.target import Target

from .records import Measured


class ErrorKind(enum.StrEnum):
    """Why a candidate has no valid measurement (records store the name)."""

    INSTANTIATION = "INSTANTIATION_ERROR"  # the template or a schedule primitive refused it
    COMPILE = "COMPILE_ERROR"  # the C compiler failed
    RUNTIME = "RUNTIME_ERROR"  # the kernel raised, or the process died (segfault...)
    TIMEOUT = "TIMEOUT"  # build or run took longer than allowed
    WRONG_ANSWER = "WRONG_ANSWER"  # ran, but the output differs from the reference
    UNKNOWN = "UNKNOWN_ERROR"


@dataclass
class MeasureOption:
    """How candidates are measured. ``timeout`` bounds one candidate's run (seconds)."""

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


@dataclass
class MeasureResult(Measured):
    costs: list = field(default_factory=list)
    error: ErrorKind | None = None
    error_msg: str = ""
    build_s: float = 0.0
    run_s: float = 0.0
    ts: float = field(default_factory=time.time)


def _spec(task, cfg) -> dict:
    return {
        "module": task.template.module,
        "template": task.name,
        "args": list(task.args),
        "config": cfg.to_json() if hasattr(cfg, "to_json") else dict(cfg),
        "target": task.target.name,
        "workload": task.workload_key,
    }


def _load_template(spec):
    mod = spec["module"]
    if mod not in ("__main__", "__mp_main__"):
        importlib.import_module(mod)  # registers the template in this process
    from .task import get_template

    return get_template(spec["template"])


def _short(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}"
    return text if len(text) < 2000 else text[:2000] + " ..."


# ---------------------------------------------------------------- building (pool workers)


def _build_worker(spec: dict) -> dict:
    """Instantiate and compile one candidate; returns a dict of plain data."""
    import pypto as pt
    from pypto.codegen_c import codegen
    from pypto.runtime import compile_source

    t0 = time.perf_counter()
    try:
        tpl = _load_template(spec)
        s, tensors = tpl.instantiate(spec["config"], *spec["args"], target=spec["target"])
        func = pt.lower(s, tensors, name="candidate")
    except Exception as e:  # noqa: BLE001 - any template failure is the candidate's error
        return {"error": ErrorKind.INSTANTIATION.value, "msg": _short(e)}
    try:
        target = Target(spec["target"])
        src, _ = codegen(func, target)
        compile_source(src, target.cflags, timeout=spec["build_timeout"])
    except pt.BuildError as e:
        return {"error": ErrorKind.COMPILE.value, "msg": _short(e)[:4000]}
    except Exception as e:  # noqa: BLE001
        return {"error": ErrorKind.COMPILE.value, "msg": _short(e)}
    return {"build_s": time.perf_counter() - t0}


# ---------------------------------------------------------------- running (the child)


def _random_inputs(tensors, rng):
    from pypto.tensor import PlaceholderOp

    arrays, outputs = [], []
    for t in tensors:
        shape = tuple(int(d.value) for d in t.shape)
        dt = np.dtype(t.dtype)
        if isinstance(t.op, PlaceholderOp):
            if dt.kind == "f":
                arrays.append(rng.uniform(-1, 1, shape).astype(dt))
            elif dt.kind in "iu":
                arrays.append(rng.integers(0, 8, shape).astype(dt))
            else:
                arrays.append(np.zeros(shape, dt))
        else:
            arrays.append(np.full(shape, np.nan, dt) if dt.kind == "f" else np.zeros(shape, dt))
            outputs.append(len(arrays) - 1)
    return arrays, outputs


class _Runner:
    """State of the runner child: inputs and expected outputs per workload."""

    def __init__(self):
        self.cases: dict = {}
        self.flush_buf = None

    def case(self, spec, tpl, tensors, seed):
        key = spec["workload"]
        if key not in self.cases:
            import pypto as pt

            rng = np.random.default_rng(seed)
            arrays, outs = _random_inputs(tensors, rng)
            inputs = [a for i, a in enumerate(arrays) if i not in outs]
            if tpl.reference is not None:
                ref = tpl.reference_output(inputs, spec["args"])
            else:  # the default config is the reference
                space = tpl.space(*spec["args"], target=spec["target"])
                s, ts = tpl.instantiate(space.default_config(), *spec["args"])
                mod = pt.build(s, ts, target=spec["target"])
                mod(*arrays)
                ref = [arrays[i].copy() for i in outs]
            self.cases[key] = (arrays, outs, [np.asarray(r) for r in ref])
        return self.cases[key]

    def prepare(self, spec: dict, opt: dict) -> dict:
        """Inputs and expected outputs of a workload, outside any candidate's timeout."""
        tpl = _load_template(spec)
        space = tpl.space(*spec["args"], target=spec["target"])
        _, tensors = tpl.instantiate(space.default_config(), *spec["args"])
        self.case(spec, tpl, tensors, opt["seed"])
        return {"prepared": True}

    def flush(self):
        if self.flush_buf is None:
            self.flush_buf = np.zeros(64 * 1024 * 1024 // 8)
        self.flush_buf += 1.0

    def run(self, spec: dict, opt: dict) -> dict:
        import pypto as pt

        t0 = time.perf_counter()
        try:
            tpl = _load_template(spec)
            s, tensors = tpl.instantiate(spec["config"], *spec["args"], target=spec["target"])
            mod = pt.build(s, tensors, target=spec["target"], name="candidate")
        except pt.BuildError as e:
            return {"error": ErrorKind.COMPILE.value, "msg": _short(e)}
        except Exception as e:  # noqa: BLE001
            return {"error": ErrorKind.INSTANTIATION.value, "msg": _short(e)}
        try:
            arrays, outs, ref = self.case(spec, tpl, tensors, opt["seed"])
            for i in outs:
                arrays[i][...] = np.nan if arrays[i].dtype.kind == "f" else 0
            mod(*arrays)
            if opt["check_correctness"]:
                for i, r in zip(outs, ref):
                    got = arrays[i]
                    if got.shape != r.shape or not np.allclose(
                        got, r, rtol=opt["rtol"], atol=opt["atol"]
                    ):
                        err = (
                            np.nanmax(np.abs(got.astype(np.float64) - r))
                            if got.shape == r.shape
                            else float("nan")
                        )
                        return {
                            "error": ErrorKind.WRONG_ANSWER.value,
                            "msg": f"output {i} differs from the reference "
                            f"(max abs error {err:.3g})",
                        }
            costs = []
            ev = mod.time_evaluator(
                number=opt["number"], repeat=1, min_repeat_ms=opt["min_repeat_ms"]
            )
            for _ in range(opt["repeat"]):
                if opt["flush_cache"]:
                    self.flush()
                costs.append(ev(*arrays).results[0])
        except Exception as e:  # noqa: BLE001
            return {"error": ErrorKind.RUNTIME.value, "msg": _short(e)}
        return {"costs": costs, "run_s": time.perf_counter() - t0}


def _runner_main(conn):
    os.environ["PYPTO_MEASURING"] = "1"
    runner = _Runner()
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
            out = runner.run(spec, opt) if kind == "run" else runner.prepare(spec, opt)
        except Exception:  # noqa: BLE001 - never let the loop die on a bug
            out = {"error": ErrorKind.UNKNOWN.value, "msg": traceback.format_exc()[-2000:]}
        conn.send(("done", out))


# ---------------------------------------------------------------- the parent side


class Measurer:
    """Builds candidates in a process pool and runs them in a replaceable child."""

    def __init__(self, option: MeasureOption | None = None):
        self.option = option or MeasureOption()
        self.ctx = mp.get_context("spawn")
        self.pool = None
        self.proc = None
        self.conn = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self._stop_runner()
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
            self._kill_pool()
            self.pool = None

    # ---- building

    def _pool(self):
        if self.pool is None:
            n = self.option.n_parallel or os.cpu_count() or 1
            self.pool = cf.ProcessPoolExecutor(max_workers=n, mp_context=self.ctx)
        return self.pool

    def _kill_pool(self):
        procs = getattr(self.pool, "_processes", None) or {}
        for p in list(procs.values()):
            try:
                p.kill()
            except (OSError, AttributeError):
                pass

    def build(self, specs) -> list[dict]:
        pool = self._pool()
        futures = [pool.submit(_build_worker, s) for s in specs]
        # each compile stops itself at build_timeout; this is the backstop for a stuck worker
        waves = -(-len(specs) // (self.option.n_parallel or os.cpu_count() or 1))
        deadline = time.monotonic() + (self.option.build_timeout + 30) * waves
        out = []
        broken = False
        for f in futures:
            try:
                out.append(f.result(timeout=max(0.1, deadline - time.monotonic())))
            except cf.TimeoutError:
                out.append(
                    {
                        "error": ErrorKind.TIMEOUT.value,
                        "msg": f"build took longer than {self.option.build_timeout:.0f} s",
                    }
                )
                broken = True
            except Exception as e:  # noqa: BLE001 - a dead worker (crash in the template)
                out.append(
                    {
                        "error": ErrorKind.INSTANTIATION.value,
                        "msg": f"the build process failed: {_short(e)}",
                    }
                )
                broken = True
        if broken:  # replace the pool: a worker may be stuck or dead
            self.pool.shutdown(wait=False, cancel_futures=True)
            self._kill_pool()
            self.pool = None
        return out

    # ---- running

    def _start_runner(self):
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=_runner_main, args=(child,), daemon=True)
        proc.start()
        child.close()
        if not parent.poll(120):
            proc.kill()
            raise RuntimeError("the measurement process did not start")
        parent.recv()
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
        if self.proc is None or not self.proc.is_alive():
            self._stop_runner(kill=True)
            self._start_runner()
        o = self.option
        if spec["workload"] not in self.prepared:  # the reference is not the candidate's time
            r = self._exchange("prepare", spec, max(300.0, 10 * o.timeout))
            if "error" in r:
                r["msg"] = "preparing the reference failed: " + r["msg"]
                return r
            self.prepared.add(spec["workload"])
        return self._exchange("run", spec, o.timeout)

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
        }
        try:
            self.conn.send((kind, spec, opt))
            if self.conn.poll(timeout):
                return self.conn.recv()[1]
            self._stop_runner(kill=True)
            return {
                "error": ErrorKind.TIMEOUT.value,
                "msg": f"the {kind} took longer than {timeout:g} s",
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
                return {
                    "error": ErrorKind.RUNTIME.value,
                    "msg": f"the candidate crashed the measurement process ({how})",
                }
            return {
                "error": ErrorKind.RUNTIME.value,
                "msg": f"the measurement process died (exit code {code})",
            }

    def measure(self, task, configs) -> list[MeasureResult]:
        """Build all candidates in parallel, then run them one at a time."""
        check_measurable(task.target)
        specs = [{**_spec(task, c), "build_timeout": self.option.build_timeout} for c in configs]
        built = self.build(specs)
        results = []
        for spec, b in zip(specs, built):
            if "error" in b:
                results.append(MeasureResult(error=ErrorKind(b["error"]), error_msg=b["msg"]))
                continue
            r = self.run(spec)
            if "error" in r:
                results.append(
                    MeasureResult(
                        error=ErrorKind(r["error"]), error_msg=r["msg"], build_s=b["build_s"]
                    )
                )
            else:
                results.append(
                    MeasureResult(costs=r["costs"], build_s=b["build_s"], run_s=r["run_s"])
                )
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
