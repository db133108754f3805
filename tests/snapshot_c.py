"""A snapshot of the C that pypto generates: the golden kernels and every built-in
template's default config, for every named target.

The snapshot is one JSON file of sha256 digests (tests/golden/c_snapshot.json),
keyed ``template(args)@target``. tests/test_snapshot_c.py compares the current C
with it; a restructuring of the compiler must leave every digest unchanged, or
the commit says which change was intended.

    python tests/snapshot_c.py            # compare; exit 1 and list what differs
    python tests/snapshot_c.py --update   # rewrite the snapshot from the current C
    python tests/snapshot_c.py --diff [REV]   # print how the C differs from git REV's (HEAD)
    python tests/snapshot_c.py --keep-c DIR   # also write each kernel's C into DIR
    python tests/snapshot_c.py --times    # time ``pt.lower`` of every template default

All C is made with ``emit_only=True``: a named target's code does not depend on
the host, so the snapshot is the same on any machine.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
# the compiler whose C is made: this checkout, or (for --diff) an exported revision of it
ROOT = pathlib.Path(os.environ.get("PYPTO_SNAPSHOT_ROOT", HERE.parent))
sys.path.insert(0, str(ROOT))

import pypto as pt  # noqa: E402
from autotune.task import Task  # noqa: E402
from autotune.workloads import STANDARD  # noqa: E402

SNAPSHOT = HERE / "golden" / "c_snapshot.json"
TARGETS = ("x86-avx512", "x86-avx2", "aarch64-neon", "generic")


def _golden_kernels():
    """tests/test_golden.py's kernels: name -> (schedule, args) factory."""
    sys.path.insert(0, str(HERE))
    try:
        import test_golden
    finally:
        sys.path.remove(str(HERE))
    return {
        k.__name__: k
        for k in (test_golden.matmul_relu, test_golden.softmax, test_golden.packed_matmul)
    }


def template_workloads() -> list[tuple[str, tuple]]:
    """Every (template, args) of the standard workloads, each once."""
    seen = []
    for w in STANDARD:
        key = (w.template, tuple(w.task_args))
        if key not in seen:
            seen.append(key)
    return seen


def _default(name: str, args: tuple, target: str):
    task = Task(name, args, target=target)
    return task.instantiate(task.config_space.default_config())


def kernels():
    """Yield ``(key, make)``: ``make()`` returns ``(schedule, args, kernel name, target)``."""
    for kname, k in _golden_kernels().items():
        for t in TARGETS:
            yield f"golden:{kname}@{t}", (lambda k=k, kname=kname, t=t: (*k(), kname, t))
    for name, args in template_workloads():
        for t in TARGETS:
            key = f"{name}({','.join(map(str, args))})@{t}"

            def make(name=name, args=args, t=t):
                s, tensors = _default(name, args, t)
                return s, tensors, name, t

            yield key, make


def current_c() -> dict[str, str]:
    """key -> generated C, for every kernel of the snapshot."""
    out = {}
    for key, make in kernels():
        s, args, kname, t = make()
        out[key] = pt.build(s, args, target=t, name=kname, emit_only=True)
    return out


def digest(src: str) -> str:
    return hashlib.sha256(src.encode()).hexdigest()


def compare(sources: dict[str, str], stored: dict[str, str]) -> list[str]:
    """Keys whose C differs from the snapshot, is new, or is gone."""
    keys = sorted(set(sources) | set(stored))
    return [k for k in keys if stored.get(k) != (digest(sources[k]) if k in sources else None)]


def lower_times(repeat: int = 5) -> dict[str, float]:
    """Best-of-``repeat`` CPU seconds of ``pt.lower`` for each template default (x86-avx2;
    CPU time, so that other processes on a shared machine disturb it less)."""
    out = {}
    for name, args in template_workloads():
        best = float("inf")
        for _ in range(repeat):
            s, tensors = _default(name, args, "x86-avx2")
            t0 = time.process_time()
            pt.lower(s, tensors, name=name)
            best = min(best, time.process_time() - t0)
        out[f"{name}({','.join(map(str, args))})"] = best
    return out


_OLD: dict = {}


def old_c(rev: str) -> dict[str, str]:
    """key -> C as git revision ``rev`` of pypto, cost_models and autotune generates it (run in a
    subprocess on an export of that revision)."""
    if rev not in _OLD:
        with tempfile.TemporaryDirectory(prefix="pypto-snapshot-") as tmp:
            archive = subprocess.run(
                ["git", "archive", rev, "pypto", "cost_models", "autotune"],
                cwd=HERE.parent,
                check=True,
                capture_output=True,
            ).stdout
            subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
            out = pathlib.Path(tmp) / "c"
            subprocess.run(
                [sys.executable, __file__, "--keep-c", str(out), "--update-to", os.devnull],
                env={**os.environ, "PYPTO_SNAPSHOT_ROOT": tmp},
                check=True,
            )
            _OLD[rev] = {f.stem: f.read_text() for f in out.glob("*.c")}
    return _OLD[rev]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--update", action="store_true", help="rewrite the snapshot")
    p.add_argument(
        "--diff", nargs="?", const="HEAD", metavar="REV", help="print the C that differs from REV's"
    )
    p.add_argument("--keep-c", metavar="DIR", help="write each kernel's C into DIR")
    p.add_argument("--update-to", metavar="FILE", help=argparse.SUPPRESS)
    p.add_argument("--times", action="store_true", help="time pt.lower of every template")
    a = p.parse_args(argv)
    if a.times:
        times = lower_times()
        for k, v in times.items():
            print(f"{v * 1e3:9.2f} ms  {k}")
        print(f"{sum(times.values()) * 1e3:9.2f} ms  total")
        return 0
    sources = current_c()
    if a.keep_c:
        d = pathlib.Path(a.keep_c)
        d.mkdir(parents=True, exist_ok=True)
        for k, src in sources.items():
            (d / (k.replace("/", "_") + ".c")).write_text(src)
    if a.update or a.update_to:
        pathlib.Path(a.update_to or SNAPSHOT).write_text(
            json.dumps({k: digest(v) for k, v in sorted(sources.items())}, indent=1) + "\n"
        )
        if a.update:
            print(f"wrote {len(sources)} digests to {SNAPSHOT}")
        return 0
    stored = json.loads(SNAPSHOT.read_text())
    differ = compare(sources, stored)
    for k in differ:
        print(f"differs: {k}")
        if a.diff and k in sources:
            before = old_c(a.diff).get(k, "")
            sys.stdout.writelines(
                line + "\n"
                for line in difflib.unified_diff(
                    before.splitlines(), sources[k].splitlines(), f"{a.diff}:{k}", k, lineterm=""
                )
            )
    print(f"{len(sources) - len(differ)} of {len(sources)} kernels identical")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
