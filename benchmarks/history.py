"""Benchmark history: every ``python -m benchmarks --json`` run appends one line, and the
README's performance table is generated from a line of it, never pasted.

    python -m benchmarks --json                      # appends to benchmarks/history.jsonl
    python -m benchmarks.history                     # the table of the last entry (markdown)
    python -m benchmarks.history --update README.md  # rewrite the README's table from it

An entry is one JSON object: when, where (CPU model, target, cores, pypto version,
commit), how (runs, threads, the BLAS numpy ran) and what (peaks per thread count, and
per thread count and kernel the medians ``combine`` gives). The README's table sits
between the markers ``<!-- perf-table -->`` and ``<!-- /perf-table -->``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # also run by path: python benchmarks/history.py

from benchmarks.common import cpu_name  # noqa: E402

HISTORY = os.path.join(ROOT, "benchmarks", "history.jsonl")
START, END = "<!-- perf-table -->", "<!-- /perf-table -->"
REFS = ("numpy", "torch", "torch.compile")
REF_NAMES = {"numpy": "numpy", "torch": "PyTorch eager", "torch.compile": "torch.compile"}


def _commit() -> str:
    try:
        r = subprocess.run(
            ["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return r.stdout.strip() if r.returncode == 0 else ""
    except (OSError, subprocess.TimeoutExpired):
        return ""


def entry(results: dict, peaks: dict, runs: int, target: str, version: str, blas: str) -> dict:
    """One history line for a run of the suite (JSON keys are strings: thread counts too)."""
    return {
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpu": cpu_name(),
        "target": target,
        "cores": os.cpu_count(),
        "pypto": version,
        "commit": _commit(),
        "runs": runs,
        "blas": blas,
        "peaks": {str(t): p for t, p in peaks.items()},
        "results": {str(t): r for t, r in results.items()},
    }


def append(e: dict, path: str = HISTORY) -> None:
    """Append one entry as one line (one write: a killed run leaves no partial entry)."""
    with open(path, "a") as f:
        f.write(json.dumps(e, sort_keys=True) + "\n")


def load(path: str = HISTORY) -> list[dict]:
    """Every readable entry, oldest first (a line that does not parse is skipped)."""
    out = []
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if isinstance(e, dict) and "results" in e and "peaks" in e:
                out.append(e)
    return out


def _ratio(r: dict, ref: str) -> str:
    v = r.get(ref)
    return f"{v:.1f} ({r[f'ratio {ref}']:.2f}x)" if v else ""


def markdown(e: dict) -> str:
    """The README's table for one entry: a caption line, then one row per thread count and
    kernel (pypto tuned, of peak, the default config, and the references with pypto's
    ratio over each)."""
    runs = e.get("runs", 1)
    how = f"medians over {runs} whole runs" if runs > 1 else "medians of one run's timed rounds"
    lines = [
        f"Measured {e['timestamp'][:10]} on {e['cpu']} ({e['cores']} cores, target "
        f"`{e['target']}`), pypto {e['pypto']}{' at ' + e['commit'] if e.get('commit') else ''};"
        f" {how}; {e.get('blas', '')}.",
        "",
        "| threads | kernel | unit | pypto tuned | of peak | default (/tuned) | "
        + " | ".join(REF_NAMES[r] for r in REFS)
        + " |",
        "|--:|---|---|--:|--:|--:|" + "---|" * len(REFS),
    ]
    for t in sorted(e["results"], key=int):
        peak = e["peaks"][t]
        for label, r in e["results"][t].items():
            mem = r["unit"] == "GB/s"
            # a dot-product kernel's row (int8, bfloat16) is held to its instruction's roof
            of_peak = r["pypto"] / (r.get("roof") or peak["triad_gbps" if mem else "fma_gflops"])
            tuned = r.get("tuned", True)
            default = f"{r['default']:.1f} ({r['default/tuned']:.2f})" if tuned else "no record"
            cells = [t, label, r["unit"], f"{r['pypto']:.1f}", f"{of_peak:.0%}", default]
            cells += [_ratio(r, ref) for ref in REFS]
            lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    peaks = "; ".join(
        f"{t} thread(s): FMA {p['fma_gflops']:.1f} GFLOP/s, triad {p['triad_gbps']:.1f} GB/s"
        for t, p in sorted(e["peaks"].items(), key=lambda kv: int(kv[0]))
    )
    lines += ["", f"Peaks in the same run: {peaks}."]
    return "\n".join(lines)


def update(readme: str, table: str) -> str:
    """``readme`` with the text between the table markers replaced by ``table``."""
    if readme.count(START) != 1 or readme.count(END) != 1:
        raise ValueError(f"the README needs exactly one {START} ... {END} block")
    head, rest = readme.split(START)
    _, tail = rest.split(END)
    return f"{head}{START}\n{table}\n{END}{tail}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.history",
        description="Print, or write into the README, the performance table of a "
        "benchmark history entry (python -m benchmarks --json appends them).",
    )
    p.add_argument("--history", default=HISTORY, help="the history file (JSON Lines)")
    p.add_argument("--entry", type=int, default=-1, help="which entry (default -1: the last)")
    p.add_argument("--update", metavar="README", help="rewrite the table in this file")
    a = p.parse_args(argv)
    entries = load(a.history)
    if not entries:
        p.error(f"no benchmark entries in {a.history}; run python -m benchmarks --json")
    try:
        e = entries[a.entry]
    except IndexError:
        p.error(f"--entry {a.entry}: {a.history} has {len(entries)} entries")
    table = markdown(e)
    if not a.update:
        print(table)
        return 0
    with open(a.update) as f:
        text = f.read()
    try:
        new = update(text, table)
    except ValueError as err:
        p.error(str(err))
    with open(a.update, "w") as f:
        f.write(new)
    print(f"{a.update}: table of the {e['timestamp']} entry written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
