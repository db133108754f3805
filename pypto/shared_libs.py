"""Loading and unloading kernels' shared objects.

A process that builds kernel after kernel (a tuning runner, a long fuzz campaign)
keeps every library it loaded mapped unless it unloads them: after about 10,000 of
them ``dlopen`` fails with ENOMEM (``vm.max_map_count``). A module unloads its
library when it is collected (``unload``). What a kernel's library pulled in with it
(the OpenMP runtime, for the first one with a parallel loop) stays loaded for good:
unloading libgomp under its sleeping worker threads crashed the process.

    lib = load(path)      # the kernel's library; libraries it brought in are pinned
    ...
    unload(lib)           # dlclose: unmapped once no other load of it is left
"""

from __future__ import annotations

import _ctypes
import ctypes
import os

_PINNED: dict = {}  # path -> a handle kept for the life of the process
_MAPS = "/proc/self/maps"
CAN_UNLOAD = os.path.exists(_MAPS) and hasattr(os, "RTLD_NOLOAD")


def _mapped() -> set:
    """The paths of the shared objects mapped into this process."""
    with open(_MAPS) as f:
        return {
            line.split(None, 5)[5].strip() for line in f if line.count(" ") >= 5 and ".so" in line
        }


def load(path: str) -> ctypes.CDLL:
    """``ctypes.CDLL(path)``, with each library it brought into the process pinned."""
    if not CAN_UNLOAD:
        return ctypes.CDLL(path)
    before = _mapped()
    lib = ctypes.CDLL(path)
    own = os.path.realpath(path)
    for dep in _mapped() - before:
        if dep != own and dep not in _PINNED:
            try:
                _PINNED[dep] = ctypes.CDLL(dep, mode=os.RTLD_NOLOAD)
            except OSError:
                pass
    return lib


def unload(lib: ctypes.CDLL) -> None:
    """Drop this load of ``lib`` (see the module's docstring); nothing of it may be
    called afterwards."""
    if CAN_UNLOAD:
        _ctypes.dlclose(lib._handle)
