"""``pt.load_module("k.so")``: a kernel saved with ``mod.export_library("k.so")``.

    mod.export_library("k.so")     # k.so, and k.so.json: signature, C source, sha256, target
    mod = pt.load_module("k.so")   # no compiler needed; the same argument checks

The sha256 in the signature file covers the object and the fields that decide how it
is called (shapes, which arguments are written, the C symbol), so neither is used with
an edited or swapped other; and its target must be one this machine runs (a module
exported on an AVX-512 machine is refused on an AVX2-only one instead of dying of an
illegal instruction). The loader keeps one object per path, so each content is loaded
from its own copy (``loaded-<sha256>.so``, checked again on every load: a damaged copy
is rewritten) in the build cache, or, where that cannot be written (a read-only
deployment), in a private temporary directory, removed when the process exits.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import tempfile
import time

from .cache import atomic_write, cache_dir
from .errors import BuildEnvironmentError, TargetError
from .module import SIGNATURE_FORMAT, Module, Signature, saved_digest
from .target import Target, can_run, missing_features


def load_module(path: str) -> Module:
    """``pt.load_module("k.so")``: a kernel saved with ``mod.export_library("k.so")``, with
    the same argument checks as the module ``pt.build`` made. No compiler is needed."""
    path = os.fspath(path)
    side = path + ".json"
    for p, what in ((path, "shared object"), (side, "signature file")):
        if not os.path.isfile(p):
            why = "is a directory" if os.path.isdir(p) else "is missing"
            raise FileNotFoundError(f"no saved module at {path}: its {what} {p} {why}")
    for attempt in range(4):  # an export in progress renames its two files in turn
        meta, data = _read_pair(path, side)
        digest = saved_digest(data, meta)
        if digest == meta.get("sha256"):
            break
        if attempt == 3:
            raise ValueError(
                f"{path} and {side} do not belong together (their sha256 differs: one of "
                "them was edited or replaced); export the module again"
            )
        time.sleep(0.02)
    try:
        target = Target(meta["target"])
        sig = Signature.from_json(meta["signature"])
    except (KeyError, TypeError, ValueError, AttributeError, SyntaxError, RecursionError) as e:
        raise ValueError(f"{side}: not a valid pypto module signature ({e!r})") from None
    if not can_run(target):
        raise TargetError(
            f"{path} was built for {target.name}, which this machine cannot run (it lacks "
            f"{', '.join(missing_features(target)) or 'its architecture'}); export it again "
            "from a build for this machine's target"
        )
    loaded = os.path.join(_copies_dir(), f"loaded-{digest}.so")
    if not _holds(loaded, data):  # missing, or damaged since: written again
        atomic_write(loaded, data, 0o700)
    return Module(None, meta["source"], sig.cname, loaded, target, sig)


def _read_pair(path: str, side: str) -> tuple:
    """The signature file's content and the object's bytes."""
    with open(side) as f:
        try:
            meta = json.load(f)
        except ValueError as e:
            raise ValueError(f"{side}: not a pypto module signature ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") != SIGNATURE_FORMAT:
        got = meta.get("format") if isinstance(meta, dict) else None
        again = "; export it again with this version" if isinstance(got, int) else ""
        if isinstance(got, int) and got > SIGNATURE_FORMAT:
            again = f" (it is of format {got}, made by a newer pypto); upgrade pypto to load it"
        raise ValueError(
            f"{side}: not a pypto module signature of format {SIGNATURE_FORMAT}{again}"
        )
    with open(path, "rb") as f:
        return meta, f.read()


def _holds(path: str, data: bytes) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read() == data
    except OSError:
        return False


@functools.cache
def _private_dir() -> str:
    """A temporary directory of this process's, removed when it exits (the objects loaded
    from it stay mapped)."""
    d = tempfile.mkdtemp(prefix="pypto-loaded-")
    atexit.register(shutil.rmtree, d, True)
    return d


def _copies_dir() -> str:
    """The build cache, or, where it cannot be written, a private temporary directory."""
    try:
        return cache_dir()
    except BuildEnvironmentError:
        return _private_dir()
