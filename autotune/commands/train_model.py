"""``pypto-tune train-model [LOG ...] [--out DIR]``: fit one cost model per target from
tuning logs (default: your records and the shipped ones) into DIR (default
``$PYPTO_HOME/models``; the models shipped with pypto are never overwritten by default)."""

from __future__ import annotations

import argparse
import os

from .. import store
from ..pretrain import train
from ..task import get_template
from .common import UsageError, add_import_argument, import_modules, load_logs


def add_arguments(p: argparse.ArgumentParser) -> None:
    """This subcommand's arguments."""
    p.add_argument(
        "logs", nargs="*", metavar="LOG",
        help="tuning logs to learn from (default: $PYPTO_HOME/logs/*.jsonl and the shipped "
        "records)",
    )  # fmt: skip
    p.add_argument(
        "--out", metavar="DIR", default=None,
        help="where <target>.json is written (default: $PYPTO_HOME/models)",
    )  # fmt: skip
    add_import_argument(p)


def run(a: argparse.Namespace) -> int:
    """Run the subcommand on parsed arguments; returns the exit status."""
    logs = a.logs or store.default_logs()
    if not logs:
        raise UsageError("no tuning logs given, and none in the user's store or shipped")
    import_modules(a.imports)
    recs = load_logs(logs)  # every log exists and reads (warnings for corrupt lines)
    out = a.out or store.models_dir()
    what = f"--out {out}" if a.out else f"your model store ($PYPTO_HOME/models: {out})"
    if os.path.exists(out) and not os.path.isdir(out):
        raise UsageError(f"{what} is not a directory")
    try:  # before the training, not after it
        os.makedirs(out, mode=0o700, exist_ok=True)
    except OSError as e:
        raise UsageError(f"{what}: cannot create it ({e.strerror})") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise UsageError(f"{what}: cannot write there")
    targets = sorted({r.target for r in recs})
    print(f"training on {len(recs)} record(s) of {len(targets)} target(s) from {len(logs)} "
          "log(s): a model per target, each featurizing its records (minutes for thousands)",
          flush=True)  # fmt: skip

    def say(target, rows, path):
        print(f"{target}: trained on {rows} configs -> {path}", flush=True)

    done = train(logs, out_dir=out, say=say)
    if not done:
        unknown = sorted({r.template for r in recs if not _registered(r.template)})
        why = (f" (records of templates not registered here were skipped: "
               f"{', '.join(unknown)}; --import the module that defines them)"
               if unknown else "")  # fmt: skip
        print(f"no target had enough valid records to train a model{why}")
        return 1
    return 0


def _registered(name: str) -> bool:
    try:
        get_template(name)
    except KeyError:
        return False
    return True
