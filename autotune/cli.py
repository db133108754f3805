"""``pypto-tune``: tune templates, read and plot logs, train cost models, validate configs.

    pypto-tune all --minutes 10                                 # every standard workload
    pypto-tune network resnet18 --minutes 20                    # a model's workloads
    pypto-tune tune matmul --args 1024,1024,1024 --trials 200   # to $PYPTO_HOME/logs/
    pypto-tune matmul --args 1024,1024,1024 --trials 200        # the same (short form)
    pypto-tune best LOG [--json]          pypto-tune list
    pypto-tune show conv2d_nchw --args 1,64,56,56,64,3,3,1,1
    pypto-tune plot LOG ... -o curves.png pypto-tune validate matmul --args 256,256,256
    pypto-tune train-model [LOG ...] [--out DIR]

Each subcommand is one entry of ``COMMANDS``: a module with ``add_arguments(parser)``
and ``run(namespace) -> int``. Bad arguments end with a one-line reason and exit
status 2, never a traceback (set PYPTO_DEBUG=1 to see one for an unexpected failure);
a target this machine cannot run is a bad argument too. A broken compiler, cache or
worker pool ends the run with exit status 3 and no record against any config.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import warnings

from pypto._version import __version__
from pypto.errors import TargetError

from .commands.common import UsageError, remove_empty_logs
from .measure import EnvironmentFault

# name -> (module with add_arguments(parser) and run(namespace) -> int, one-line help)
COMMANDS = {
    "tune": ("autotune.commands.tune", "tune a template on this machine, appending to a log"),
    "all": ("autotune.commands.tune_all", "tune every standard workload within one budget"),
    "network": ("autotune.commands.network", "tune a model's workloads, report its time"),
    "best": ("autotune.commands.best", "the best config per workload in tuning logs"),
    "list": ("autotune.commands.listing", "the templates, their arguments and shipped workloads"),
    "show": ("autotune.commands.show", "a template's knobs and default config for given args"),
    "plot": ("autotune.commands.plot", "a PNG of best-so-far GFLOP/s against trials"),
    "train-model": ("autotune.commands.train_model", "fit the cost models from tuning logs"),
    "validate": ("autotune.commands.validate", "check default and best configs vs reference"),
}

__all__ = ["COMMANDS", "UsageError", "main", "parser"]


class _Parser(argparse.ArgumentParser):
    """Usage errors become ``UsageError`` (one line, exit 2) instead of argparse's exit."""

    def error(self, message):
        positional = any(not a.option_strings for a in self._actions)
        if message.startswith("unrecognized arguments:") and not positional:
            got = message.split(":", 1)[1].strip()
            raise UsageError(f"'{self.prog.split()[-1]}' takes no arguments, got {got}")
        usage = " ".join(self.format_usage().split())
        hint = f"({usage})" if len(usage) <= 80 else f"(see '{self.prog} --help')"
        raise UsageError(f"{message} {hint}")


def parser() -> argparse.ArgumentParser:
    """The whole command line: one subparser per entry of ``COMMANDS``."""
    p = _Parser(
        prog="pypto-tune",
        description="Tune pypto templates and work with tuning records. "
        "'pypto-tune TEMPLATE ...' is short for 'pypto-tune tune TEMPLATE ...'.",
    )
    p.add_argument("--version", action="version", version=f"pypto-tune {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (module, help_) in COMMANDS.items():
        mod = importlib.import_module(module)
        sp = sub.add_parser(
            name,
            help=help_,
            description=(mod.__doc__ or help_).split("\n\n")[0].replace("``", "'"),
            usage=getattr(mod, "USAGE", None),
        )
        mod.add_arguments(sp)
        sp.set_defaults(run=mod.run)
    p.subcommands = sub.choices
    return p


class _Terminated(KeyboardInterrupt):
    """SIGTERM, taken as Ctrl-C is: what finished is logged, then a one-line message."""


def _terminate(signum, frame):
    raise _Terminated


def main(argv=None) -> int:
    """``pypto-tune``: parse ``argv`` (default ``sys.argv[1:]``), run the subcommand, and
    return the exit status (2 for a bad command line, with a one-line reason; 130 after
    Ctrl-C, 143 after SIGTERM, the log holding every finished trial; 141, quietly, when
    the reader of the output has gone)."""
    try:
        before = signal.signal(signal.SIGTERM, _terminate)
    except ValueError:  # not the main thread: leave signals alone
        before = None
    shown = warnings.formatwarning
    warnings.formatwarning = _one_line  # a warning is a line for the user, not a source line
    status = 1
    try:
        status = _main(argv)
        return status
    finally:
        remove_empty_logs(failed=status != 0)
        warnings.formatwarning = shown
        if before is not None:
            signal.signal(signal.SIGTERM, before)


def _one_line(message, category, filename, lineno, line=None) -> str:
    return f"warning: {message}\n"


def _main(argv) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and not argv[0].startswith("-") and argv[0] not in COMMANDS:
        argv.insert(0, "tune")  # pypto-tune TEMPLATE ... is short for pypto-tune tune ...
    try:
        p = parser()
        if not argv:
            p.print_help(sys.stderr)
            return 2
        ns, extra = p.parse_known_args(argv)
        if ns.command is None:  # options only, none of them known (pypto-tune -v)
            p.error(f"unrecognized arguments: {' '.join(extra)}; a COMMAND comes first")
        if extra:
            p.subcommands[ns.command].error(f"unrecognized arguments: {' '.join(extra)}")
        return ns.run(ns)
    except SystemExit as e:  # --help
        return e.code if isinstance(e.code, int) else 0
    except (UsageError, TargetError) as e:
        print(f"pypto-tune: error: {e}", file=sys.stderr)
        return 2
    except EnvironmentFault as e:  # not the candidates': nothing was recorded against them
        print(f"pypto-tune: the build or run environment failed: {e}", file=sys.stderr)
        return 3
    except KeyboardInterrupt as e:
        how = "terminated" if isinstance(e, _Terminated) else "interrupted"
        print(f"pypto-tune: {how}; the log holds every finished trial (use --resume)",
              file=sys.stderr)  # fmt: skip
        return 143 if isinstance(e, _Terminated) else 130
    except BrokenPipeError:  # the reader left (pypto-tune list | head): quietly, as Unix tools do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # no second error when Python flushes stdout
        return 141
    except Exception as e:  # noqa: BLE001 - one line, not a traceback
        if os.environ.get("PYPTO_DEBUG"):
            raise
        first = (str(e).strip().splitlines() or [""])[0]  # one line (a C++ backtrace follows)
        print(f"pypto-tune: error: {type(e).__name__}: {first}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
