"""The C a generated file carries besides its kernel: math and integer helpers, heap
buffers (allocation, the blocks kept between calls, overflow-checked sizes), checked
indexing; and the limits that decide where a temporary lives.

``codegen_c`` emits each text only where the kernel uses it.
"""

from __future__ import annotations

STACK_LIMIT = 4 * 1024  # bytes: larger local buffers go on the heap (a big stack array
# next to a register tile invites 4K-aliasing stalls)
# function-level buffers of a constant size up to this many bytes are kept from one call
# to the next (``WORKSPACE``): malloc hands big blocks back to the system on free, and
# a call that gets them again pays a page fault per 4 KiB (3x the time of a Winograd
# convolution whose 7 MB of intermediates came back from the system in every call);
# ``Module`` frees them when it is collected (``pt_release_workspace``)
WORKSPACE_MAX = 64 << 20

# helper functions emitted on demand: name -> C text ({t} is the C type)
HELPERS = {
    # signed +, -, * that wrap (two's complement) where C's would overflow: through the
    # unsigned type, whose arithmetic C defines as wrapping
    "wadd": "static inline {t} pt_wadd_{s}({t} a, {t} b) {{ return ({t})((u{t})a + (u{t})b); }}",
    "wsub": "static inline {t} pt_wsub_{s}({t} a, {t} b) {{ return ({t})((u{t})a - (u{t})b); }}",
    "wmul": "static inline {t} pt_wmul_{s}({t} a, {t} b) {{ return ({t})((u{t})a * (u{t})b); }}",
    # shifts as numpy's: by the width or more, or by a negative amount, 0 (or the sign)
    "shl": (
        "static inline {t} pt_shl_{s}({t} a, {t} b) {{\n"
        "  return (uint64_t)b < {bits} ? ({t})(({u})a << b) : 0;\n}}"
    ),
    "shr": (
        "static inline {t} pt_shr_{s}({t} a, {t} b) {{\n"
        "  return (uint64_t)b < {bits} ? a >> b : (a >> ({bits} - 1)) >> 1;\n}}"
    ),
    # float min and max propagate NaN from either side (numpy's maximum/minimum,
    # PyTorch's); as written, a reduction's accumulator (a) goes through one vmaxps
    # (a NaN a stays) and b's NaN is a blend off that chain
    "fmin": (
        "static inline {t} pt_min_{s}({t} a, {t} b) {{\n"
        "  {t} m = b < a ? b : a;\n  return b != b ? b : m;\n}}"
    ),
    "fmax": (
        "static inline {t} pt_max_{s}({t} a, {t} b) {{\n"
        "  {t} m = b > a ? b : a;\n  return b != b ? b : m;\n}}"
    ),
    "clz": (
        "static inline int32_t pt_clz(uint64_t a, int32_t bits) {\n"
        "  return a == 0 ? bits : __builtin_clzll(a) - (64 - bits);\n}"
    ),
    "abs": "static inline {t} pt_abs_{s}({t} a) {{ return a < 0 ? ({t})(0 - ({u})a) : a; }}",
    "min": "static inline {t} pt_min_{s}({t} a, {t} b) {{ return a < b ? a : b; }}",
    "max": "static inline {t} pt_max_{s}({t} a, {t} b) {{ return a > b ? a : b; }}",
    "floordiv": (
        "static inline {t} pt_floordiv_{s}({t} a, {t} b) {{\n"
        "  {t} q = a / b;\n  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;\n}}"
    ),
    "mod": (
        "static inline {t} pt_mod_{s}({t} a, {t} b) {{\n"
        "  {t} r = a % b;\n  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;\n}}"
    ),
    # a divisor known only at run time: 0 stops the kernel (status -4) instead of trapping,
    # and -1 negates without the INT_MIN / -1 trap (signed types: an unsigned type's
    # largest value is no -1)
    "cfloordiv": (
        "static inline {t} pt_cfloordiv_{s}({t} a, {t} b, int32_t* status) {{\n"
        "  if (b == 0) {{ __atomic_store_n(status, -4, __ATOMIC_RELAXED); return 0; }}\n"
        "  if (({t})-1 < 0 && b == ({t})-1) return ({t})(0 - (uint64_t)a);\n"
        "  {t} q = a / b;\n  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;\n}}"
    ),
    "cmod": (
        "static inline {t} pt_cmod_{s}({t} a, {t} b, int32_t* status) {{\n"
        "  if (b == 0) {{ __atomic_store_n(status, -4, __ATOMIC_RELAXED); return 0; }}\n"
        "  if (({t})-1 < 0 && b == ({t})-1) return 0;\n"
        "  {t} r = a % b;\n  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;\n}}"
    ),
    # float // and % as numpy's (and Python's) divmod: the remainder from fmod takes the
    # divisor's sign, the quotient is (a - r) / b snapped to an integer, so that
    # 1.0 // 0.1 is 9.0 and 1.0 % 0.1 is 0.09999999999999995 (floor(a / b) gives 10.0
    # and a remainder of -5.6e-17); fmod is a libm call, so such a loop is not vectorized
    "fmod": (
        "static inline {t} pt_mod_{s}({t} a, {t} b) {{\n"
        "  {t} r = fmod{f}(a, b);\n"
        "  if (r != 0 && ((b < 0) != (r < 0))) r += b;\n"
        "  return r == 0 ? copysign{f}(0, b) : r;\n}}"
    ),
    "ffloordiv": (
        "static inline {t} pt_floordiv_{s}({t} a, {t} b) {{\n"
        "  if (b == 0) return a / b;\n"
        "  {t} r = fmod{f}(a, b), q = (a - r) / b;\n"
        "  if (r != 0 && ((b < 0) != (r < 0))) q -= 1;\n"
        "  if (q == 0) return copysign{f}(0, a / b);\n"
        "  {t} f = floor{f}(q);\n"
        "  return q - f > 0.5 ? f + 1 : f;\n}}"
    ),
}

# float -> int32/int64 as x86's conversion (and numpy's there): a value outside the
# type (NaN, infinities) gives its minimum. C leaves it undefined, and gcc would fold
# (float)(int)x into truncf(x); narrower types and uint32 convert through these and wrap
FLOAT_TO_INT = (
    "static inline {i} {name}({t} x) {{\n  return x >= {lo} && x < {hi} ? ({i})x : {min};\n}}"
)

# float -> uint64 as x86-64 code converts it (numpy's there): below 2^63 as int64 (so
# -8.7 wraps to 2^64 - 8, NaN gives 2^63), from 2^63 on as int64 after subtracting 2^63,
# that bit set again (2^64 and inf give 0). C leaves it undefined outside [0, 2^64):
# AVX-512's own instruction gives 2^64 - 1 for a negative value
FLOAT_TO_UINT64 = (
    "static inline uint64_t {name}({t} x) {{\n"
    "  return x >= 9223372036854775808.0{f} ? (uint64_t){i_high} ^ (UINT64_C(1) << 63)\n"
    "                                     : (uint64_t){i};\n}}"
)

# a value the compiler may not fold into its neighbours: (float)PT_KEEP((int64_t)x) stays
# two conversions, where gcc would make (float)(int64_t)x truncf(x) (-0.0 for x = -0.5)
KEEP = """#if defined(__has_builtin)
#if __has_builtin(__builtin_assoc_barrier)
#define PT_KEEP(x) __builtin_assoc_barrier(x)
#endif
#endif
#ifndef PT_KEEP
#define PT_KEEP(x) (x)
#endif"""

# an integer that came from a float, converted back: +0.0 for 0 however the compiler
# folds the two conversions (into trunc, which keeps the sign of -0.5)
INT_TO_FLOAT = "static inline {f} {name}({i} r) {{\n  return r == 0 ? ({f})0 : ({f})PT_KEEP(r);\n}}"

# ``malloc``: the block aliases no other pointer, so gcc may keep values of one buffer
# in registers across stores to another (predictive commoning); ``noinline`` keeps
# that knowledge, which inlining the body would lose; ``assume_aligned``: the block
# starts on a cache line, so vector loads and stores of it may be aligned ones
ALLOC = """__attribute__((malloc, noinline, assume_aligned(64)))
static void* pt_alloc(size_t bytes) {
  void* p = NULL;
  size_t n = (bytes + 63) / 64 * 64;
  if (posix_memalign(&p, 64, n ? n : 64) != 0) return NULL;
  return p;
}
__attribute__((malloc, noinline, assume_aligned(64)))
static void* pt_alloc_or_die(size_t bytes) {
  void* p = pt_alloc(bytes);
  if (!p) { fputs("pypto: out of memory in a parallel region\\n", stderr); abort(); }
  return p;
}"""


# one block per function-level buffer, grown when a call needs more, owned by one call
# at a time: a call that finds them taken (another thread's call) allocates and frees
# its own; pt_release_workspace frees them between calls. ``malloc`` as for pt_alloc:
# during a call the block is reached only through the pointer it returns
WORKSPACE = """static void* pt_ws_block[{n}];
static size_t pt_ws_bytes[{n}];
static int pt_ws_busy;
__attribute__((malloc, noinline, assume_aligned(64)))
static void* pt_workspace(int slot, size_t bytes) {{
  if (pt_ws_block[slot] && pt_ws_bytes[slot] >= bytes) return pt_ws_block[slot];
  free(pt_ws_block[slot]);
  pt_ws_block[slot] = pt_alloc(bytes);
  pt_ws_bytes[slot] = pt_ws_block[slot] ? bytes : 0;
  return pt_ws_block[slot];
}}
int32_t pt_release_workspace(void) {{
  if (__atomic_exchange_n(&pt_ws_busy, 1, __ATOMIC_ACQUIRE)) return 1;
  for (int i = 0; i < {n}; ++i) {{
    free(pt_ws_block[i]);
    pt_ws_block[i] = NULL;
    pt_ws_bytes[i] = 0;
  }}
  __atomic_store_n(&pt_ws_busy, 0, __ATOMIC_RELEASE);
  return 0;
}}"""


# byte counts of heap buffers: every product and sum checked, negative extents count as 0
SIZE_CHECK = """static inline int64_t pt_size_mul(int64_t a, int64_t b, int32_t* bad) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) { *bad = 1; return 0; }
  return r;
}
static inline int64_t pt_size_add(int64_t a, int64_t b, int32_t* bad) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) { *bad = 1; return 0; }
  return r;
}
static inline int64_t pt_size_dim(int64_t d) { return d > 0 ? d : 0; }"""

MAX_BYTES = 2**62  # a buffer of this many bytes is refused before any allocation is tried

CLAMPED_INDEX = """static inline int64_t pt_clamped_index(int64_t i, int64_t n) {
  return i < 0 ? 0 : i >= n ? n - 1 : i;
}"""

CHECKED_INDEX = """static inline int64_t pt_checked_index(int64_t i, int64_t n, int32_t code,
                                       int32_t* status) {
  if (i >= 0 && i < n) return i;
  __atomic_store_n(status, code, __ATOMIC_RELAXED);
  return i < 0 || n <= 0 ? 0 : n - 1;  /* as pt_clamped_index: a region's offset agrees */
}"""
