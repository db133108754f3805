"""The errors pypto raises on purpose."""

from __future__ import annotations


class PyptoError(Exception):
    """Base of pypto's own errors."""


class ScheduleError(PyptoError, ValueError):
    """A schedule primitive that is malformed or would change the result."""


class BuildError(PyptoError, RuntimeError):
    """The C compiler rejected generated code; carries its stderr and the kept source."""

    def __init__(self, message: str, stderr: str = "", source_path: str | None = None):
        super().__init__(message)
        self.stderr = stderr
        self.source_path = source_path

    def __str__(self):
        text = super().__str__()
        if self.source_path:
            text += f"\nsource kept at: {self.source_path}"
        if self.stderr:
            text += f"\ncompiler output:\n{self.stderr.strip()}"
        return text


class CompilerKilled(BuildError):
    """The C compiler was killed by a signal (the out-of-memory killer, a user): not
    the source's fault as such; a tuner tries the candidate once more, alone."""


class TargetError(PyptoError, ValueError):
    """Code for a target this machine cannot run was asked to run or be measured."""


class BuildEnvironmentError(BuildError):
    """The build environment is broken, not the code: no working C compiler, a compiler
    that reports success but writes no object, an unusable cache directory. The same
    build would fail for any kernel, so a tuner stops instead of blaming a candidate."""


# TVM names with no counterpart here (pypto makes CPU code): what to use instead
TVM_ONLY = {
    "bind": "GPU thread binding; on a CPU, parallel() and vectorize() a loop",
    "thread_axis": "GPU thread axes; on a CPU, parallel() and vectorize() a loop",
    "env_threads": "GPU thread axes; on a CPU, parallel() a loop",
    "set_scope": "memory scopes; cache_read/cache_write take the scope of their copy",
    "storage_align": "shared-memory padding; buffers here are 64-byte aligned",
    "double_buffer": "GPU double buffering; prefetch() overlaps loads on a CPU",
    "set_store_predicate": "store predicates; pt.select or where= in the definition",
}


def tvm_only(owner: str, name: str, python_owner: str) -> AttributeError:
    """The error for ``owner.name``: a hint for TVM's names, else Python's own message
    (``python_owner``: "module 'pypto'", "'Stage' object")."""
    if name in TVM_ONLY:
        return AttributeError(f"{owner}.{name} is TVM's ({TVM_ONLY[name]}); pypto has none")
    return AttributeError(f"{python_owner} has no attribute {name!r}")
