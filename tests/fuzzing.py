"""The settings of the hypothesis tests: ``PYPTO_FUZZ_EXAMPLES`` examples per test
(default 25) and no deadline (each example compiles a kernel); ``REPEATABLE`` also
draws the same examples on every run and keeps no example database, so CI repeats
itself and a failure reproduces."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

FUZZ = settings(
    max_examples=int(os.environ.get("PYPTO_FUZZ_EXAMPLES", "25")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
REPEATABLE = settings(FUZZ, derandomize=True, database=None)
