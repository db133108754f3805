"""Tuning records: JSON Lines, one measurement per line, versioned.

    {"v": 1, "pypto": "0.1.0", "workload": ["matmul", [1024, 1024, 1024]],
     "target": "x86-avx2", "config": {"tile_i": [-1, 6], ...}, "costs": [0.0123, ...],
     "error": null, "error_msg": "", "flop": 2147483648.0, "build_s": 0.21, "run_s": 0.4,
     "ts": 1795000000.0}

A writer appends each line with one ``write`` under an exclusive ``flock``,
so two tuners can share a file and a killed one leaves at most a partial
last line, which the next writer terminates and every reader skips (and
counts, with a warning). Lines of an unknown format version are skipped
the same way.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import statistics
import time
import warnings
from dataclasses import dataclass, field

from pypto import __version__ as PYPTO_VERSION

FORMAT_VERSION = 1


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

    @property
    def gflops(self) -> float:
        return self.flop / self.cost / 1e9 if self.ok and self.flop else 0.0

    @property
    def template(self) -> str:
        return json.loads(self.workload)[0]

    @property
    def args(self) -> list:
        return json.loads(self.workload)[1]

    def to_json(self) -> str:
        d = {
            "v": FORMAT_VERSION,
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
            "ts": self.ts,
        }
        return json.dumps(d, separators=(",", ":"))

    @staticmethod
    def from_json(line: str) -> Record:
        """Parse one line; ValueError for anything that is not a valid record."""
        d = json.loads(line)
        if not isinstance(d, dict) or d.get("v") != FORMAT_VERSION:
            raise ValueError("unknown format version")
        w = d["workload"]
        if not (
            isinstance(w, list) and len(w) == 2 and isinstance(w[0], str) and isinstance(w[1], list)
        ):
            raise ValueError("bad workload")
        costs = d.get("costs") or []
        if not isinstance(d["config"], dict) or not all(isinstance(c, (int, float)) for c in costs):
            raise ValueError("bad config or costs")
        return Record(
            workload=json.dumps(w, separators=(",", ":")),
            target=str(d["target"]),
            config=d["config"],
            costs=[float(c) for c in costs],
            error=d.get("error"),
            error_msg=str(d.get("error_msg", "")),
            flop=float(d.get("flop") or 0.0),
            build_s=float(d.get("build_s") or 0.0),
            run_s=float(d.get("run_s") or 0.0),
            ts=float(d.get("ts") or 0.0),
            pypto=str(d.get("pypto", "")),
        )


def append_records(path: str, records) -> None:
    """Append whole lines atomically (one write under an exclusive lock)."""
    data = "".join(r.to_json() + "\n" for r in records)
    if not data:
        return
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size:
            with open(path, "rb") as f:  # a killed writer may have left a partial line
                f.seek(size - 1)
                if f.read(1) != b"\n":
                    data = "\n" + data
        buf = data.encode()
        while buf:
            n = os.write(fd, buf)
            buf = buf[n:]
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def read_log(path: str) -> tuple[list[Record], int]:
    """Records of one file and the number of lines skipped."""
    out, bad = [], 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                out.append(Record.from_json(line))
            except (ValueError, KeyError, TypeError):
                bad += 1
    return out, bad


def load_records(src) -> list[Record]:
    """Records from a path, a list of paths, or records; corrupt lines skipped with a warning."""
    if isinstance(src, Record):
        return [src]
    if isinstance(src, (str, os.PathLike)):
        src = [src]
    out: list[Record] = []
    for item in src:
        if isinstance(item, Record):
            out.append(item)
            continue
        path = os.fspath(item)
        if not os.path.exists(path):
            raise FileNotFoundError(f"no tuning log at {path}")
        recs, bad = read_log(path)
        if bad:
            warnings.warn(f"{path}: skipped {bad} corrupt or unknown-version line(s)", stacklevel=2)
        out.extend(recs)
    return out


def ranked_configs(records) -> dict:
    """(workload, target) -> its configs as records, fastest first.

    A config measured more than once (``pypto-tune --confirm``) becomes one record
    whose costs are all its timings, so it counts by their median: one lucky
    measurement does not outrank a config that held up to several. A config with any
    failed measurement (an error, a timeout, a wrong result) is left out.
    """
    groups: dict = {}
    for r in records:
        key = (r.workload, r.target, json.dumps(r.config, sort_keys=True))
        groups.setdefault(key, []).append(r)
    ranked: dict = {}
    for (workload, target, _), recs in groups.items():
        if not all(r.ok for r in recs):
            continue
        r = recs[-1]
        if len(recs) > 1:
            r = dataclasses.replace(r, costs=[c for x in recs for c in x.costs])
        ranked.setdefault((workload, target), []).append(r)
    for recs in ranked.values():
        recs.sort(key=lambda r: r.cost)
    return ranked


def one_per_config(records) -> list:
    """Each measured config once: with all its timings (``ranked_configs``), or, for a
    config that failed any measurement, its first failed record. For fitting models."""
    ok = [r for recs in ranked_configs(records).values() for r in recs]
    seen = {(r.workload, r.target, json.dumps(r.config, sort_keys=True)) for r in ok}
    failed: dict = {}
    for r in records:
        key = (r.workload, r.target, json.dumps(r.config, sort_keys=True))
        if key not in seen and not r.ok:
            failed.setdefault(key, r)
    return ok + list(failed.values())


def best_by_workload(records) -> dict:
    """(workload, target) -> the fastest valid config's record (see ``ranked_configs``)."""
    return {key: recs[0] for key, recs in ranked_configs(records).items()}


def pick_best(in_path, out_path: str) -> int:
    """Write the best valid record per (workload, target) of ``in_path`` to ``out_path``."""
    best = best_by_workload(load_records(in_path))
    tmp = out_path + ".tmp"
    with open(tmp, "w") as f:
        for r in sorted(best.values(), key=lambda r: (r.workload, r.target)):
            f.write(r.to_json() + "\n")
    os.replace(tmp, out_path)
    return len(best)
