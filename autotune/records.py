"""Tuning records: JSON Lines, one measurement per line, versioned.

    {"version": 1, "pypto": "0.1.0", "workload": ["matmul", [1024, 1024, 1024]],
     "target": "x86-avx2", "config": {"tile_i": [-1, 6], ...}, "costs": [0.0123, ...],
     "error": null, "error_msg": "", "flop": 2147483648.0, "build_s": 0.21, "run_s": 0.4,
     "timestamp": 1795000000.0, "threads": 2}

``threads`` is how many threads the candidate ran with (absent in older logs: not
known); ``error`` is the kind (``"COMPILE_ERROR"``, ...) or null, ``error_msg`` the message.
Readers also take the short names of earlier logs (``v``, ``ts``) and an error given as
``{"kind": ..., "message": ...}``.

A writer appends each line with one ``write`` under an exclusive ``flock``,
so two tuners can share a file and a killed one leaves at most a partial
last line, which the next writer terminates and every reader skips (and
counts, with a warning). Lines of an unknown format version are skipped
the same way.
"""

from __future__ import annotations

import dataclasses
import enum
import fcntl
import json
import math
import os
import statistics
import time
import warnings
from dataclasses import dataclass, field

from pypto import __version__ as PYPTO_VERSION
from pypto.cache import atomic_write, private_dirs

FORMAT_VERSION = 1
MAX_LINE = 1 << 20  # characters; a longer line is skipped as corrupt


class ErrorKind(enum.StrEnum):
    """Why a candidate has no valid measurement (records store the name)."""

    INSTANTIATION = "INSTANTIATION_ERROR"  # the template or a schedule primitive refused it
    COMPILE = "COMPILE_ERROR"  # the C compiler failed
    RUNTIME = "RUNTIME_ERROR"  # the kernel raised, or the process died (segfault...)
    TIMEOUT = "TIMEOUT"  # build or run took longer than allowed
    WRONG_ANSWER = "WRONG_ANSWER"  # ran, but the output differs from the reference
    UNKNOWN = "UNKNOWN_ERROR"


# A COMPILE_ERROR beside valid measurements of the same config was the environment's:
# compiling is deterministic, and the config's code compiled when it was measured.
# Logs written before environment faults stopped a tuning run (instead of being
# recorded against every candidate, e.g. with CC unset or broken) hold such records;
# they do not disqualify the config. A config with compile errors only stays out:
# old records cannot tell a broken compiler from a rejected source.
OVERRULED_BY_MEASUREMENTS = frozenset({ErrorKind.COMPILE.value})


class Measured:
    """What counts as a valid measurement and its cost, shared by measurement results
    and records, so a tuner and a log always agree on which config is best."""

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.costs)

    @property
    def cost(self) -> float:
        """Median seconds per run (inf for a failed candidate)."""
        return statistics.median(self.costs) if self.ok else float("inf")


CONFIRM = "confirm"  # the tuner of a re-measurement of a config found earlier (confirm_best)


@dataclass
class Record(Measured):
    workload: str  # workload key: '["matmul",[1024,1024,1024]]'
    target: str
    config: dict
    costs: list = field(default_factory=list)  # seconds per run, one per repeat
    error: str | None = None  # an ErrorKind name, None when the candidate ran and was right
    error_msg: str = ""
    flop: float = 0.0
    build_s: float = 0.0
    run_s: float = 0.0
    ts: float = field(default_factory=time.time)
    pypto: str = PYPTO_VERSION
    tuner: str = ""  # the search that proposed the config ("" when not known; CONFIRM)
    threads: int = 0  # the threads it ran with (0: not known, a log older than the field)

    @property
    def gflops(self) -> float:
        return self.flop / self.cost / 1e9 if self.ok and self.flop and self.cost > 0 else 0.0

    @property
    def speed(self) -> float:
        """What the cost models learn to rank: GFLOP/s, or runs per second for a workload
        of no counted flops (a copy; its GFLOP/s are all 0); 0 for a failure."""
        if not self.ok or not self.cost > 0:
            return 0.0
        return self.gflops if self.flop else 1.0 / self.cost

    @property
    def template(self) -> str:
        return json.loads(self.workload)[0]

    @property
    def args(self) -> list:
        return json.loads(self.workload)[1]

    def to_json(self) -> str:
        d = {
            "version": FORMAT_VERSION,
            "pypto": self.pypto,
            "workload": json.loads(self.workload),
            "target": self.target,
            "config": self.config,
            "costs": self.costs,
            "error": self.error,
            "error_msg": self.error_msg,
            "flop": self.flop,
            "build_s": round(self.build_s, 6),
            "run_s": round(self.run_s, 6),
            "timestamp": self.ts,
            **({"tuner": self.tuner} if self.tuner else {}),
            **({"threads": self.threads} if self.threads else {}),
        }
        return json.dumps(d, separators=(",", ":"))

    @staticmethod
    def from_json(line: str) -> Record:
        """Parse one line; ValueError for anything that is not a valid record: costs
        must be finite and positive, times and flop finite and non-negative, every
        field of its type, a record without an error must have costs."""
        if len(line) > MAX_LINE:
            raise ValueError("line too long")
        try:
            d = json.loads(line)
        except RecursionError:
            raise ValueError("nested too deeply") from None
        version = d.get("version", d.get("v")) if isinstance(d, dict) else None
        if type(version) is not int or version != FORMAT_VERSION:  # (true == 1.0 == 1)
            raise ValueError("unknown format version")
        error, error_msg = d.get("error"), d.get("error_msg", "")
        if isinstance(error, dict) and set(error) <= {"kind", "message"}:
            error, error_msg = error.get("kind"), error.get("message", error_msg)
        w = d.get("workload")
        if not (
            isinstance(w, list) and len(w) == 2 and isinstance(w[0], str) and isinstance(w[1], list)
        ):
            raise ValueError("bad workload")
        costs = d.get("costs") or []
        if not isinstance(costs, list) or not isinstance(d.get("config"), dict):
            raise ValueError("bad config or costs")
        if not (error is None or isinstance(error, str)) or (error is None and not costs):
            raise ValueError("bad error")
        for key in ("target", "pypto", "tuner"):  # printed: no escape sequences
            if not isinstance(d.get(key, ""), str) or not d.get(key, "").isprintable():
                raise ValueError(f"bad {key}")
        if not isinstance(error_msg, str):
            raise ValueError("bad error_msg")
        threads = d.get("threads", 0)
        if type(threads) is not int or threads < 0:
            raise ValueError("bad threads")
        return Record(
            workload=json.dumps(w, separators=(",", ":")),
            target=d["target"],
            config=d["config"],
            costs=[_number(c, "cost", positive=True) for c in costs],
            error=error,
            error_msg=error_msg,
            flop=_number(d.get("flop") or 0.0, "flop"),
            build_s=_number(d.get("build_s") or 0.0, "build_s"),
            run_s=_number(d.get("run_s") or 0.0, "run_s"),
            ts=_number(d.get("timestamp", d.get("ts")) or 0.0, "timestamp"),
            pypto=d.get("pypto", ""),
            tuner=d.get("tuner", ""),
            threads=threads,
        )


def _number(v, what: str, positive: bool = False) -> float:
    """A JSON number that is finite and non-negative (positive), else ValueError."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"{what} is not a number")
    v = float(v)  # OverflowError for an int beyond any float: the reader skips the line
    if not math.isfinite(v) or v < 0 or (positive and v == 0):
        raise ValueError(f"bad {what}: {v}")
    return v


def append_records(path: str, records) -> None:
    """Append whole lines atomically (one write under an exclusive lock; a write the disk
    refuses is undone, and the error names the log). A log it
    creates is private (0600, its missing directories 0700), as ``pypto-tune`` makes
    them: records choose the configs a user's kernels run. A record that would not read
    back (``Record.from_json``: a cost of 0, a NaN) is a ``ValueError`` before anything
    is written."""
    lines = [r.to_json() for r in records]
    for n, line in enumerate(lines):
        try:
            Record.from_json(line)
        except ValueError as e:
            why = f"record {n} is not valid ({e}); nothing was appended to {path}"
            raise ValueError(why) from None
    data = "".join(line + "\n" for line in lines)
    if not data:
        return
    d = os.path.dirname(os.path.abspath(path))
    private_dirs(d)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size:
            with open(path, "rb") as f:  # a killed writer may have left a partial line
                f.seek(size - 1)
                if f.read(1) != b"\n":
                    data = "\n" + data
        buf = data.encode()
        try:
            while buf:
                n = os.write(fd, buf)
                buf = buf[n:]
        except OSError as e:  # a full disk: no partial line left behind
            os.ftruncate(fd, size)
            raise OSError(
                e.errno, f"cannot append to the tuning log {path}: {e.strerror}"
            ) from None
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def read_log(path: str) -> tuple[list[Record], int]:
    """Records of one file and the number of lines skipped (corrupt, invalid, of an
    unknown version, or longer than ``MAX_LINE``: none can make a log unreadable)."""
    out, bad = [], 0
    with open(path, encoding="utf-8", errors="replace") as f:
        while line := f.readline(MAX_LINE + 1):
            if len(line) > MAX_LINE and not line.endswith("\n"):
                while (rest := f.readline(MAX_LINE)) and not rest.endswith("\n"):
                    pass  # the rest of an overlong line, never held whole
                bad += 1
                continue
            if not line.strip():
                continue
            try:  # (a byte-order mark: a log saved by an editor, or two such logs joined)
                out.append(Record.from_json(line.lstrip("\ufeff")))
            except (ValueError, KeyError, TypeError, OverflowError):
                bad += 1
    return out, bad


def load_records(src) -> list[Record]:
    """Records from a path, a list of paths, or records (``Record``s, or log lines parsed
    as JSON: dicts); corrupt lines skipped with a warning, a dict that is no valid
    record a ``ValueError``."""
    if isinstance(src, (Record, dict)):
        src = [src]
    if isinstance(src, (str, bytes, os.PathLike)):
        src = [src]
    if not hasattr(src, "__iter__"):
        raise TypeError(
            f"tuning records come from log paths, Records or their JSON dicts, got {src!r}"
        )
    out: list[Record] = []
    for item in src:
        if isinstance(item, Record):
            out.append(item)
            continue
        if isinstance(item, dict):  # a log line, parsed
            try:
                out.append(Record.from_json(json.dumps(item)))
            except (ValueError, TypeError) as e:
                raise ValueError(f"not a valid tuning record ({e}): {item!r:.200}") from None
            continue
        if not isinstance(item, (str, bytes, os.PathLike)):
            raise TypeError(
                f"tuning records come from log paths, Records or their JSON dicts, got {item!r}"
            )
        path = os.fsdecode(item)
        if not os.path.exists(path):
            raise FileNotFoundError(f"no tuning log at {path}")
        if os.path.isdir(path):
            raise IsADirectoryError(f"{path} is a directory, not a tuning log (a .jsonl file)")
        recs, bad = read_log(path)
        key = (os.path.realpath(path), bad)
        if bad and key not in _WARNED:  # once per log and count, however often it is read
            _WARNED.add(key)
            warnings.warn(f"{path}: skipped {bad} corrupt or unknown-version line(s)", stacklevel=2)
        out.extend(recs)
    return out


_WARNED: set = set()  # (log, corrupt lines) already reported in this process


def _plain(v):
    """A knob value as the space compares it: ``8.0`` and ``true`` are ``8`` and ``1``."""
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, bool) or (isinstance(v, float) and v.is_integer()):
        return int(v)
    return v


def config_key(config: dict) -> str:
    """One key per config, whichever way a record spells its values."""
    return json.dumps({k: _plain(v) for k, v in config.items()}, sort_keys=True)


def ranked_configs(records) -> dict:
    """(workload, target) -> its configs as records, fastest first.

    A config measured more than once (``pypto-tune --confirm``) becomes one record
    whose costs are all its timings, so it counts by their median: one lucky
    measurement does not outrank a config that held up to several. Timings with
    different thread counts are not pooled: such a config appears once per count
    (timings that state none join those of the one count the others state). A
    config with any failed measurement (a crash, a timeout, a wrong result) is left out
    -- except a ``COMPILE_ERROR`` beside valid measurements
    (``OVERRULED_BY_MEASUREMENTS``).
    """
    groups: dict = {}
    for r in records:
        key = (r.workload, r.target, config_key(r.config))
        groups.setdefault(key, []).append(r)
    ranked: dict = {}
    for (workload, target, _), recs in groups.items():
        if any(not r.ok and r.error not in OVERRULED_BY_MEASUREMENTS for r in recs):
            continue
        stated = {r.threads for r in recs if r.ok} - {0}
        sole = stated.pop() if len(stated) == 1 else 0  # a log older than the field
        by_threads: dict = {}
        for r in recs:
            if r.ok:
                by_threads.setdefault(r.threads or sole, []).append(r)
        for threads, good in by_threads.items():
            r = good[-1]
            if len(good) > 1 or r.threads != threads:
                r = dataclasses.replace(
                    r, costs=[c for x in good for c in x.costs], threads=threads
                )
            ranked.setdefault((workload, target), []).append(r)
    for recs in ranked.values():
        recs.sort(key=lambda r: r.cost)
    return ranked


def failed_configs(records) -> dict:
    """(workload, target) -> the keys (``config_key``) of the configs with a failed
    measurement that ``ranked_configs`` leaves out for it (any but a ``COMPILE_ERROR``)."""
    out: dict = {}
    for r in records:
        if not r.ok and r.error not in OVERRULED_BY_MEASUREMENTS:
            out.setdefault((r.workload, r.target), set()).add(config_key(r.config))
    return out


def one_per_config(records) -> list:
    """Each measured config once: with all its timings (``ranked_configs``), or, for a
    config that failed any measurement, its first failed record. For fitting models."""
    ok = [r for recs in ranked_configs(records).values() for r in recs]
    seen = {(r.workload, r.target, config_key(r.config)) for r in ok}
    failed: dict = {}
    for r in records:
        key = (r.workload, r.target, config_key(r.config))
        if key not in seen and not r.ok:
            failed.setdefault(key, r)
    return ok + list(failed.values())


def best_by_workload(records) -> dict:
    """(workload, target) -> the fastest valid config's record (see ``ranked_configs``)."""
    return {key: recs[0] for key, recs in ranked_configs(records).items()}


def pick_best(in_path, out_path: str) -> int:
    """Write the best valid record per (workload, target) of ``in_path`` to ``out_path``,
    one per thread count and set of knob names (a record of an older version of the
    template does not hide the best that fits the current one; ``apply_history_best``
    passes over it)
    (at once, whole; ``ValueError`` for an ``out_path`` that is one of the inputs: it
    would replace the history it is picked from)."""
    ins = [in_path] if isinstance(in_path, (str, bytes, os.PathLike)) else list(in_path)
    for p in ins:
        if not isinstance(p, Record) and os.path.realpath(os.fsdecode(p)) == os.path.realpath(
            out_path
        ):
            raise ValueError(f"pick_best: {out_path} is also an input; write the best elsewhere")
    # the best of each version of a template too (its knobs' names): where the fastest
    # record no longer fits the template, the best that does is kept beside it
    best = {}
    for (w, t), recs in ranked_configs(load_records(ins)).items():
        for r in recs:
            best.setdefault((w, t, r.threads, tuple(sorted(r.config))), r)
    text = "".join(
        r.to_json() + "\n" for r in sorted(best.values(), key=lambda r: (r.workload, r.target))
    )
    atomic_write(os.path.abspath(out_path), text.encode(), 0o644)
    return len(best)
