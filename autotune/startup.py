"""What ``Tuner.tune`` settles before its first measurement: TVM's ``measure_option=``
name, the number of trials it plans (for progress bars), and a script that would tune
again in every worker process it starts.

Measurement starts worker processes with multiprocessing's ``spawn``, which re-runs the
main script (as ``__mp_main__``) in each of them. A script that tunes at its top level,
outside ``if __name__ == "__main__":``, would tune again in every worker: each worker
dies at start, and every trial would be recorded as a broken build. So such a call is
refused at once, naming the line to move under the guard.
"""

from __future__ import annotations

import ast
import sys

from .measure import MeasureOption


def begin_tuning(tuner, n_trial: int, measure=None, measure_option=None) -> MeasureOption | None:
    """The measure option to use (``measure=`` or TVM's ``measure_option=``); records the
    trials ``tune`` will make in ``tuner.planned_trials``; refuses an unguarded script."""
    if measure is not None and measure_option is not None:
        raise TypeError("tune() takes measure= or measure_option= (the same thing), not both")
    check_main_guard()
    tuner.planned_trials = max(0, min(n_trial, len(tuner.space) - len(tuner.visited)))
    return measure if measure is not None else measure_option


def _is_main_test(node) -> bool:
    """``__name__ == "__main__"`` (either way round)."""
    if not (isinstance(node, ast.Compare) and len(node.ops) == 1):
        return False
    sides = [node.left, node.comparators[0]]
    names = [s.id for s in sides if isinstance(s, ast.Name)]
    consts = [s.value for s in sides if isinstance(s, ast.Constant)]
    return isinstance(node.ops[0], ast.Eq) and names == ["__name__"] and consts == ["__main__"]


def _guarded_lines(source: str) -> list[tuple[int, int]]:
    """Line ranges of the bodies of ``if __name__ == "__main__":`` blocks."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.If) and _is_main_test(node.test):
            out.append((node.body[0].lineno, node.body[-1].end_lineno))
    return out


def check_main_guard() -> None:
    """Raise RuntimeError when the main script calls this at its top level (directly or
    through functions) outside ``if __name__ == "__main__":``."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    spec = getattr(getattr(main, "__spec__", None), "name", None) or ""
    if path is None or spec == "__main__" or spec.endswith(".__main__"):
        return  # interactive, -c, or a package's __main__: spawn does not re-run it
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals is vars(main):
            break
        frame = frame.f_back
    if frame is None:
        return
    try:
        with open(path, encoding="utf-8") as f:
            guarded = _guarded_lines(f.read())
    except (OSError, SyntaxError, ValueError):
        return
    line = frame.f_lineno
    if not any(a <= line <= b for a, b in guarded):
        raise RuntimeError(
            f"{path}, line {line}: tuning starts worker processes that re-run this script, "
            'so its tuning code must be under  if __name__ == "__main__":  (put line '
            f"{line} and what it needs there, as in the README)"
        )
