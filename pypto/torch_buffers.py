"""Output buffers of PyTorch calls: small ones from ``torch.empty``, big ones recycled.

Outputs of 1 MiB and more come from ``empty()``, a pool of recycled buffers (as
PyTorch's CUDA caching allocator does for device memory): a fresh 64 MiB tensor
costs the kernel's own time several times over in page faults, since the CPU
allocator returns big blocks to the system on every free. A buffer is reused once
no tensor or view of it is alive; ``empty_cache()`` releases the idle ones.
"""

from __future__ import annotations

import math
import sys
import threading

import numpy as np
import torch

POOL_MIN_BYTES = 1 << 20  # smaller blocks: the allocator's free lists serve them well
POOL_MAX_BYTES = 1 << 30  # idle and busy pooled buffers together; beyond it, plain tensors
_ALIGN = 64  # a cache line: full-line vector stores


class BufferPool:
    """Recycled output buffers by size. Each is a 1-d uint8 numpy array held here; the
    tensors handed out are ``torch.from_numpy`` views of it, and a view keeps a
    reference to it, so a buffer whose reference count is back to the pool's own is
    idle: no tensor, view or numpy array of it is alive any more."""

    def __init__(self, max_bytes: int = POOL_MAX_BYTES):
        self.max_bytes = max_bytes
        self._bufs: dict[int, list[np.ndarray]] = {}
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for bufs in self._bufs.values() for b in bufs)

    def _idle(self, nbytes: int) -> np.ndarray | None:
        for buf in self._bufs.get(nbytes, ()):
            if sys.getrefcount(buf) <= 3:  # the list, the loop variable, the call's argument
                return buf
        return None

    def take(self, nbytes: int) -> np.ndarray:
        """An idle buffer of ``nbytes`` (64-byte aligned), or a new one (pooled while
        the pool is under its limit)."""
        with self._lock:
            buf = self._idle(nbytes)
            if buf is None:
                raw = np.empty(nbytes + _ALIGN, np.uint8)
                off = -raw.ctypes.data % _ALIGN
                buf = raw[off : off + nbytes]
                if self.nbytes + nbytes <= self.max_bytes:
                    self._bufs.setdefault(nbytes, []).append(buf)
            return buf

    def clear_idle(self) -> None:
        with self._lock:
            for n, bufs in list(self._bufs.items()):
                keep = [b for b in bufs if sys.getrefcount(b) > 3]
                if keep:
                    self._bufs[n] = keep
                else:
                    del self._bufs[n]


_POOL = BufferPool()


def empty(shape, dtype: torch.dtype) -> torch.Tensor:
    """An uninitialized contiguous CPU tensor for a kernel's output: from the buffer
    pool when it is 1 MiB or more (no page faults after the first call of a size),
    else ``torch.empty``. Its storage cannot be resized."""
    shape = tuple(int(d) for d in shape)
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes < POOL_MIN_BYTES:
        return torch.empty(shape, dtype=dtype)
    return torch.from_numpy(_POOL.take(nbytes)).view(dtype).view(shape)


def empty_cache() -> None:
    """Release the pooled output buffers that no tensor uses any more."""
    _POOL.clear_idle()
