"""Callbacks of the tuning loop: ``cb(tuner, inputs, results)`` after each batch."""

from __future__ import annotations

import inspect

from tqdm.auto import tqdm
from tqdm.std import tqdm as std_tqdm

from .records import append_records
from .tuners import to_record


class log_to_file:  # noqa: N801 - a callback named like AutoTVM's
    """Append every measurement to a JSON Lines log (whole lines, safe to share)."""

    def __init__(self, path: str, protocol: str = "json"):
        if protocol != "json":  # AutoTVM's other protocol, "pickle", is not a log format here
            raise ValueError(f"log_to_file: protocol {protocol!r}: records are JSON Lines ('json')")
        self.path = str(path)

    def __call__(self, tuner, inputs, results):
        name = getattr(tuner, "name", "")
        append_records(self.path, [to_record(i, r, name) for i, r in zip(inputs, results)])


class progress_bar:  # noqa: N801
    """A tqdm bar: trials done of the total (by default the trials ``tune`` plans), best
    GFLOP/s so far, errors."""

    def __init__(
        self, total: int | None = None, desc: str | None = None, prefix: str = "",
        si_prefix: str = "G", **tqdm_kw,
    ):  # fmt: skip
        """``prefix`` and ``si_prefix`` as AutoTVM's (the prefix leads the description;
        rates are always GFLOP/s); other keywords go to tqdm."""
        known = inspect.signature(std_tqdm.__init__).parameters  # (auto's takes **kwargs)
        unknown = sorted(k for k in tqdm_kw if k not in known)
        if unknown:
            raise TypeError(f"progress_bar: unknown argument(s) {', '.join(unknown)}")
        self.total, self.desc, self.prefix, self.kw = total, desc, prefix, tqdm_kw
        self.bar = None
        self.errors = 0

    def start(self, tuner):
        self.bar = tqdm(
            total=self.total if self.total is not None else getattr(tuner, "planned_trials", None),
            desc=self.prefix + (self.desc or tuner.task.name),
            unit="trial",
            dynamic_ncols=True,
            **self.kw,
        )

    def __call__(self, tuner, inputs, results):
        if self.bar is None:
            self.start(tuner)
        self.errors += sum(1 for r in results if not r.ok)
        self.bar.update(len(inputs))
        self.bar.set_postfix_str(f"best {tuner.best_gflops:.1f} GFLOP/s, {self.errors} errors")

    def close(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None
