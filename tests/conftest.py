import os
import tempfile

import pytest

# Tests build into a private cache so they measure real compiles and never
# reuse objects from a developer's ~/.cache/pypto.
os.environ.setdefault("PYPTO_CACHE_DIR", tempfile.mkdtemp(prefix="pypto-test-cache-"))
# ... and a private user store, so no test reads or writes the developer's records.
os.environ.setdefault("PYPTO_HOME", tempfile.mkdtemp(prefix="pypto-test-home-"))


def pytest_addoption(parser):
    parser.addoption(
        "--update-golden",
        action="store_true",
        help="rewrite tests/golden/* from the current output",
    )


@pytest.fixture
def update_golden(request):
    return request.config.getoption("--update-golden")


@pytest.fixture(autouse=True)
def _bound_checks(request, monkeypatch):
    """Modules that set ``BOUND_CHECKS = True`` (the schedule fuzzers) build every kernel
    with run-time bound checkers (``pypto.bound_checks``): a lowering that takes an
    access outside its buffer fails there, even where the values happen to agree."""
    if getattr(request.module, "BOUND_CHECKS", False):
        monkeypatch.setenv("PYPTO_BOUND_CHECKS", "1")
