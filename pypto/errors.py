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


class TargetError(PyptoError, ValueError):
    """Code for a target this machine cannot run was asked to run or be measured."""


class BuildEnvironmentError(BuildError):
    """The build environment is broken, not the code: no working C compiler, a compiler
    that reports success but writes no object, an unusable cache directory. The same
    build would fail for any kernel, so a tuner stops instead of blaming a candidate."""
