"""Loading and unloading kernels' shared objects.

A process that builds kernel after kernel (a tuning runner, a long fuzz campaign)
keeps every library it loaded mapped unless it unloads them: after about 10,000 of
them ``dlopen`` fails with ENOMEM (``vm.max_map_count``). A module unloads its
library when it is collected (``unload``). The libraries a kernel's library needs
(its ELF ``DT_NEEDED`` entries: the OpenMP runtime, libc) stay loaded for good:
unloading libgomp under its sleeping worker threads crashed the process.

    lib = load(path)      # the kernel's library; the libraries it needs are pinned
    ...
    unload(lib)           # dlclose: unmapped once no other load of it is left

A library whose dependencies cannot be read (not a little-endian ELF64 object) is
never unloaded.
"""

from __future__ import annotations

import _ctypes
import ctypes
import os
import struct

_PINNED: dict = {}  # soname -> a handle kept for the life of the process
_UNLOADABLE: set = set()  # handles whose libraries' dependencies are pinned
_PT_LOAD, _PT_DYNAMIC, _DT_NEEDED, _DT_STRTAB = 1, 2, 1, 5


def needed(path: str) -> list | None:
    """The sonames an ELF64 little-endian shared object needs (``DT_NEEDED``), or None
    when it is no such object."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4:6] != b"\x02\x01":
        return None
    (phoff,) = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    loads, dynamic = [], (0, 0)
    for k in range(phnum):
        kind, _, offset, vaddr, _, size = struct.unpack_from("<IIQQQQ", data, phoff + k * phentsize)
        if kind == _PT_LOAD:
            loads.append((vaddr, offset, size))
        elif kind == _PT_DYNAMIC:
            dynamic = (offset, size)
    tags = []
    for at in range(dynamic[0], dynamic[0] + dynamic[1], 16):
        tag, value = struct.unpack_from("<qQ", data, at)
        if tag == 0:
            break
        tags.append((tag, value))
    names = [v for t, v in tags if t == _DT_NEEDED]
    if not names:
        return []
    strtab = next(v for t, v in tags if t == _DT_STRTAB)
    base = next(o + strtab - va for va, o, size in loads if va <= strtab < va + size)
    return [data[base + v : data.index(b"\0", base + v)].decode() for v in names]


def load(path: str) -> ctypes.CDLL:
    """``ctypes.CDLL(path)``, the libraries it needs pinned (see the module docstring)."""
    lib = ctypes.CDLL(path)
    try:
        deps = needed(path) if hasattr(os, "RTLD_NOLOAD") else None
        for name in deps or ():
            if name not in _PINNED:
                _PINNED[name] = ctypes.CDLL(name, mode=os.RTLD_NOLOAD)
    except (OSError, ValueError, StopIteration, struct.error):
        deps = None
    if deps is not None:
        _UNLOADABLE.add(lib._handle)
    else:  # (a handle of a library unloaded before may come back for this one)
        _UNLOADABLE.discard(lib._handle)
    return lib


def unload(lib: ctypes.CDLL) -> None:
    """Drop this load of ``lib`` when ``load`` pinned what it needs; nothing of it may
    be called afterwards."""
    if lib._handle in _UNLOADABLE:
        _ctypes.dlclose(lib._handle)
