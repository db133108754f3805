"""``python -m benchmarks lower_times``: CPU time of ``pt.lower`` for every built-in
template's default config (x86-avx2), optionally against another git revision,
interleaved so that the machine's load drifts alike over both.

    python -m benchmarks lower_times                        # this checkout
    python -m benchmarks lower_times --against main --rounds 5

Each round runs ``tests/snapshot_c.py --times`` (best of 5 per template) in a fresh
process, for this checkout and then for an export of the revision; per template the
best over the rounds is kept. The bar: ``new / old`` at most 1 in total.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _times(root: pathlib.Path) -> dict[str, float]:
    """Template -> milliseconds, from one run of ``snapshot_c.py --times`` of ``root``."""
    run = subprocess.run(
        [sys.executable, str(root / "tests" / "snapshot_c.py"), "--times"],
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
    )
    if run.returncode != 0:
        last = (run.stderr.strip().splitlines() or ["no message"])[-1]
        raise RuntimeError(f"timing the templates of {root} failed: {last}")
    out = run.stdout
    times = {}
    for line in out.splitlines():
        ms, _, key = line.strip().partition(" ms  ")
        if key and key != "total":
            times[key] = float(ms)
    return times


def _export(rev: str, into: str) -> pathlib.Path:
    """The compiler's tree at git revision ``rev``, extracted under ``into``."""
    known = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
        cwd=ROOT,
        capture_output=True,
    )
    if known.returncode != 0:
        raise ValueError(f"--against {rev!r} is not a git revision of {ROOT}")
    archive = subprocess.run(
        ["git", "archive", rev, "pypto", "autotune", "cost_models", "tests"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)
    return pathlib.Path(into)


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m benchmarks lower_times",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--against", metavar="REV", help="a git revision to compare with")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    a = p.parse_args(argv)
    if a.rounds < 1:
        p.error(f"--rounds must be positive, got {a.rounds}")
    with tempfile.TemporaryDirectory(prefix="pypto-lower-") as tmp:
        roots = {"new": ROOT}
        if a.against:
            try:
                roots["old"] = _export(a.against, tmp)
            except ValueError as e:
                p.error(str(e))
        best: dict = {k: {} for k in roots}
        totals: dict = {k: [] for k in roots}
        for _ in range(a.rounds):
            for k, root in roots.items():
                try:
                    t = _times(root)
                except RuntimeError as e:
                    p.exit(1, f"{p.prog}: {e}\n")
                totals[k].append(sum(t.values()))
                for name, ms in t.items():
                    best[k][name] = min(best[k].get(name, float("inf")), ms)
    new = best["new"]
    if "old" not in best:
        for name, ms in new.items():
            print(f"{ms:9.2f} ms  {name}")
        print(f"{sum(new.values()):9.2f} ms  total (best of {a.rounds} rounds)")
        return
    old = best["old"]
    print(f"pt.lower CPU ms, best of {a.rounds} interleaved rounds: this checkout vs {a.against}")
    print(f"{'template':<44} {'old':>8} {'new':>8} {'new/old':>8}")
    for name in sorted(set(new) & set(old)):
        print(f"{name:<44} {old[name]:8.2f} {new[name]:8.2f} {new[name] / old[name]:8.3f}")
    so, sn = sum(old[n] for n in new if n in old), sum(new[n] for n in new if n in old)
    print(f"{'total':<44} {so:8.2f} {sn:8.2f} {sn / so:8.3f}")
    rounds = ", ".join(f"{n / o:.3f}" for n, o in zip(totals["new"], totals["old"]))
    print(f"total new/old per round: {rounds}")


if __name__ == "__main__":
    main()
