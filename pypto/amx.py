"""AMX's tile state on Linux: what code using Intel's tile registers needs first.

A thread's tiles take their shapes from a 64-byte configuration (``ldtilecfg``), and
Linux enables the tiles' state per process only on request
(``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``); where the kernel refuses,
every tile instruction faults. ``C_HELPERS`` defines ``pt_amx_start()`` (ask once;
load the shapes, every tile 16 rows x 64 bytes, where the thread's tiles hold others:
``sttilecfg`` and a compare cost a few cycles, ``ldtilecfg`` hundreds, and another
library's kernel, oneDNN's say, may have left its own shapes between two calls);
``granted()`` asks from Python, which ``pypto.target`` does before it calls a CPU
with AMX flags one that runs them.
"""

from __future__ import annotations

import ctypes
import platform

TILE_ROWS, TILE_BYTES, TILES = 16, 64, 8

C_HELPERS = """#ifndef PT_AMX_HELPERS
#define PT_AMX_HELPERS
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
/* every tile 16 rows x 64 bytes (palette 1) */
static const struct {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} __attribute__((aligned(64))) pt_amx_shapes = {
  1, 0, {0}, {64, 64, 64, 64, 64, 64, 64, 64}, {16, 16, 16, 16, 16, 16, 16, 16}};
/* Linux grants the tiles' state per process, on request (ARCH_REQ_XCOMP_PERM) */
static inline void pt_amx_start(void) {
  static volatile int granted;
  if (!granted) {
    syscall(SYS_arch_prctl, 0x1023, 18);
    granted = 1;
  }
  /* all zero where the thread's tiles are not configured; the asm names all 64 bytes
     (gcc 12's _tile_storeconfig tells the compiler it writes 8) */
  struct { unsigned char b[64]; } __attribute__((aligned(64))) held;
  __asm__ volatile("sttilecfg %0" : "=m"(held));
  if (memcmp(&held, &pt_amx_shapes, 64)) _tile_loadconfig(&pt_amx_shapes);
}
#endif"""

_ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA, _SYS_ARCH_PRCTL_X86_64 = 0x1023, 18, 158


def granted() -> bool:
    """Whether Linux lets this process use AMX's tile data (asking for it, once per
    process; the kernels ask again for themselves)."""
    if platform.machine() != "x86_64":
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.syscall(_SYS_ARCH_PRCTL_X86_64, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA) == 0
    except (OSError, AttributeError):
        return False
