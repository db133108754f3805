import os
import shutil
import sys
import tempfile

import pytest

# Tests build into a private cache so they measure real compiles and never reuse
# objects from a developer's ~/.cache/pypto, and use a private user store, so no test
# reads or writes the developer's records. Both are removed when the session ends (a
# run's cache holds about 140 MB). Under pytest-xdist (``-n``) each worker makes its
# own, so no test sees another's records: the workers inherit the controller's
# variables, marked as the test session's by ``_OURS``.
_OURS = "PYPTO_TEST_SESSION_DIRS"
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
_MADE = []
for _var, _prefix in (("PYPTO_CACHE_DIR", "pypto-test-cache-"), ("PYPTO_HOME", "pypto-test-home-")):
    if _var not in os.environ or (_WORKER and _var in os.environ.get(_OURS, "").split()):
        os.environ[_var] = tempfile.mkdtemp(prefix=_prefix + (f"{_WORKER}-" if _WORKER else ""))
        os.environ[_OURS] = " ".join(sorted({*os.environ.get(_OURS, "").split(), _var}))
        _MADE.append(os.environ[_var])


def pytest_sessionfinish(session, exitstatus):
    for d in _MADE:
        shutil.rmtree(d, ignore_errors=True)


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
def _fresh_prompt_lengths():
    """Each test sees attention's prompt lengths afresh (``autotune.torch_prefill``
    builds a layer shape's first lengths as they are, later ones in buckets): which
    module a test's call runs does not depend on the tests before it in the worker."""
    prefill = sys.modules.get("autotune.torch_prefill")  # (imported by the torch tests)
    if prefill is not None:
        prefill.forget()


@pytest.fixture(autouse=True)
def _bound_checks(request, monkeypatch):
    """Modules that set ``BOUND_CHECKS = True`` (the schedule fuzzers) build every kernel
    with run-time bound checkers (``pypto.bound_checks``): a lowering that takes an
    access outside its buffer fails there, even where the values happen to agree."""
    if getattr(request.module, "BOUND_CHECKS", False):
        monkeypatch.setenv("PYPTO_BOUND_CHECKS", "1")


@pytest.fixture
def kernels(monkeypatch):
    """The modules whose kernel ran, in order (every call: a replayed plan's too; the
    PyTorch operators' plans are dropped before and after)."""
    import pypto.module
    import pypto.torch_plan  # (imports torch: only the tests that ask for it)

    ran = []
    invoke = pypto.module.Module._invoke

    def spy(self, cargs, arrays):
        ran.append(self)
        return invoke(self, cargs, arrays)

    monkeypatch.setattr(pypto.module.Module, "_invoke", spy)
    pypto.torch_plan.forget()
    yield ran
    pypto.torch_plan.forget()
