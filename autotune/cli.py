"""``pypto-tune``: tune a template, show the best record of a log, list templates.

    pypto-tune matmul --args 1024,1024,1024 --trials 200 --tuner xgb --log tuning_logs/matmul.jsonl
    pypto-tune matmul --args 1024,1024,1024 --trials 200 --resume     # continue a killed run
    pypto-tune best tuning_logs/matmul.jsonl
    pypto-tune list
    pypto-tune all --minutes 10               # every standard workload, one shared budget
    pypto-tune train-model                    # cost_models/pretrained/<target>.json

Bad arguments end with a one-line reason and exit status 2, never a traceback
(set PYPTO_DEBUG=1 to see one for an unexpected failure).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings

TUNERS = {"xgb": "XGBTuner", "ga": "GATuner", "random": "RandomTuner", "grid": "GridSearchTuner"}


class UsageError(Exception):
    """A bad command line: reported in one line, exit status 2."""


def _parse_args_list(text: str) -> list:
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            raise UsageError(f"--args: empty value in {text!r}")
        try:
            out.append(int(part))
        except ValueError:
            try:
                out.append(float(part))
            except ValueError:
                out.append(part)  # e.g. a dtype name
    return out


def _positive(name, zero_ok: bool = False):
    def conv(text):
        try:
            v = float(text) if name == "--timeout" else int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} takes a number, got {text!r}") from None
        if v < 0 or (v == 0 and not zero_ok):
            what = "non-negative" if zero_ok else "positive"
            raise argparse.ArgumentTypeError(f"{name} must be {what}, got {text}")
        return v

    return conv


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def _tune_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="pypto-tune",
        description="Tune a pypto template on this machine and "
        "append the measurements to a JSON Lines log.",
        epilog="Other commands: 'pypto-tune best LOG' (best record per workload), "
        "'pypto-tune list' (templates), 'pypto-tune all --minutes M' (every standard "
        "workload, see 'pypto-tune all --help'), 'pypto-tune train-model [LOG ...]' (the shipped "
        "cost model, from tuning_logs/).",
    )
    p.add_argument("template", help="template name (see 'pypto-tune list')")
    p.add_argument(
        "--args",
        required=True,
        help="the template's arguments, comma-separated, e.g. 1024,1024,1024",
    )
    p.add_argument(
        "--trials",
        type=_positive("--trials"),
        default=200,
        help="how many configs to measure in total (default 200)",
    )
    p.add_argument(
        "--tuner", choices=sorted(TUNERS), default="xgb", help="search strategy (default xgb)"
    )
    p.add_argument("--target", default="host", help="hardware target (default: this host)")
    p.add_argument(
        "--log", help="JSON Lines log to append to (default tuning_logs/<template>.jsonl)"
    )
    p.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import a Python module that registers templates (repeatable)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="count the log's records of this workload as done and measure the rest",
    )
    p.add_argument(
        "--timeout",
        type=_positive("--timeout"),
        default=10.0,
        help="seconds one candidate may run before it is recorded as a timeout",
    )
    p.add_argument(
        "--number",
        type=_positive("--number"),
        default=5,
        help="calls per timing repeat (default 5)",
    )
    p.add_argument(
        "--repeat",
        type=_positive("--repeat"),
        default=3,
        help="timing repeats per candidate (default 3)",
    )
    p.add_argument(
        "--early-stopping",
        type=_positive("--early-stopping"),
        default=None,
        help="stop after this many trials without improvement",
    )
    p.add_argument(
        "--confirm",
        type=_positive("--confirm", zero_ok=True),
        default=4,
        metavar="K",
        help="after the search, measure the K fastest configs twice more, in interleaved "
        "rounds, so the best one is the one that holds up, not the luckiest draw; a config "
        "counts by the median of all its timings (default 4, 0: off)",
    )
    p.add_argument("--seed", type=int, default=None, help="random seed of the tuner")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def cmd_list(argv) -> int:
    import autotune as at

    if argv:
        raise UsageError(f"'list' takes no arguments, got {' '.join(argv)}")
    for name in at.list_templates():
        t = at.get_template(name)
        doc = (t.__doc__ or "").strip().splitlines()
        print(f"{name:24s} {doc[0] if doc else ''}")
    return 0


def cmd_best(argv) -> int:
    import autotune as at

    if len(argv) != 1 or argv[0].startswith("-"):
        raise UsageError("usage: pypto-tune best LOG")
    path = argv[0]
    if not os.path.exists(path):
        raise UsageError(f"no tuning log at {path}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        recs = at.load_records(path)
    for w in caught:
        print(f"warning: {w.message}", file=sys.stderr)
    best = at.best_by_workload(recs)
    if not best:
        print(f"{path}: {len(recs)} record(s), none valid")
        return 1
    for (workload, target), r in sorted(best.items()):
        rate = f"{r.gflops:.1f} GFLOP/s, " if r.gflops else ""
        print(
            f"{workload} on {target}: {r.cost * 1e3:.4g} ms ({rate}of "
            f"{sum(1 for x in recs if x.workload == workload and x.target == target)} "
            f"records)\n  config {r.config}"
        )
    return 0


def cmd_train(argv) -> int:
    from .pretrain import train

    if any(a.startswith("-") for a in argv):
        raise UsageError("usage: pypto-tune train-model [LOG ...]")
    for path in argv:
        if not os.path.exists(path):
            raise UsageError(f"no tuning log at {path}")
    try:
        done = train(argv or None)
    except FileNotFoundError as e:
        raise UsageError(str(e)) from None
    if not done:
        print("no target had enough valid records to train a model")
        return 1
    for target, rows in done.items():
        print(f"{target}: trained on {rows} configs")
    return 0


def cmd_all(argv) -> int:
    from . import tune_all

    p = _Parser(prog="pypto-tune all", description=tune_all.DESCRIPTION)
    tune_all.add_arguments(p)
    return tune_all.run(p.parse_args(argv))


def cmd_tune(argv) -> int:
    import autotune as at
    from pypto.target import Target

    a = _tune_parser().parse_args(argv)
    if a.imports and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # modules next to the user, as with python -m
    for mod in a.imports:
        try:
            importlib.import_module(mod)
        except ImportError as e:
            raise UsageError(f"--import {mod}: {e}") from None
    try:
        at.get_template(a.template)
    except KeyError as e:
        raise UsageError(str(e).strip("'\"")) from None
    args = _parse_args_list(a.args)
    try:
        target = Target(a.target)
    except ValueError as e:
        raise UsageError(str(e)) from None
    try:
        task = at.Task(a.template, args, target=target)
    except TypeError as e:
        raise UsageError(f"--args do not fit template {a.template!r}: {e}") from None
    except (ValueError, at.SpaceError) as e:
        raise UsageError(f"--args: {e}") from None
    log = a.log or os.path.join("tuning_logs", f"{a.template}.jsonl")
    tuner = getattr(at, TUNERS[a.tuner])(task, seed=a.seed)
    done = 0
    if a.resume and os.path.exists(log):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            done = tuner.load_history(at.load_records(log))
        for w in caught:
            print(f"warning: {w.message}", file=sys.stderr)
        print(f"resuming: {done} trial(s) of this workload already in {log}")
    remaining = max(0, a.trials - done)
    callbacks = [at.log_to_file(log)]
    if not a.no_progress:
        callbacks.append(at.progress_bar(total=remaining))
    opt = at.MeasureOption(number=a.number, repeat=a.repeat, timeout=a.timeout)
    tuner.tune(remaining, measure=opt, early_stopping=a.early_stopping, callbacks=callbacks)
    if tuner.best_config is None:
        print(f"no valid config among {len(tuner.history)} trial(s); see {log}")
        return 1
    if a.confirm > 0:
        made = at.confirm_best(task, log, a.confirm, measure=opt)
        if made:
            print(f"confirmed the {a.confirm} fastest: {made} more measurement(s)")
    best = at.best_by_workload(at.load_records(log)).get((task.workload_key, task.target.key))
    if best is None:  # every record of the best config failed on re-measurement
        print(f"no config held up to re-measurement; see {log}")
        return 1
    rate = f" ({best.gflops:.1f} GFLOP/s)" if best.gflops else ""
    print(
        f"best of {len(tuner.history)} trial(s): {best.cost * 1e3:.4g} ms{rate} "
        f"(median of {len(best.costs)} timing(s))\n  config {best.config}\n  log {log}"
    )
    return 0


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if not argv or argv[0] in ("-h", "--help"):
            _tune_parser().print_help()
            return 0 if argv else 2
        cmds = {"list": cmd_list, "best": cmd_best, "train-model": cmd_train, "all": cmd_all}
        cmd = cmds.get(argv[0])
        return cmd(argv[1:]) if cmd else cmd_tune(argv)
    except UsageError as e:
        print(f"pypto-tune: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            "pypto-tune: interrupted; the log holds every finished trial (use --resume)",
            file=sys.stderr,
        )
        return 130
    except Exception as e:  # noqa: BLE001 - one line, not a traceback
        if os.environ.get("PYPTO_DEBUG"):
            raise
        print(f"pypto-tune: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
