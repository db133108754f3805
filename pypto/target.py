"""Hardware targets: one description that codegen, templates, features and records share.

A named target (``"x86-avx512"``, ``"x86-avx2"``, ``"aarch64-neon"``,
``"generic"``, and ``"x86-avx512-bf16"``, ``"x86-avx2-vnni"``, ``"aarch64-dotprod"``:
the same machines as their ``base`` with int8/bfloat16 dot-product instructions;
``"x86-amx"``: ``x86-avx512-bf16`` with AMX's tile matrix multiplies) has
fixed parameters, so the code made for it is the same on any machine.
``Target("host")`` resolves to the richest named target this CPU runs
(``$PYPTO_TARGET`` overrides the choice) and takes the machine's own cache
sizes and core count::

    t = pt.Target("host")            # e.g. x86-avx512-bf16 on a Zen 4
    t.vector_lanes("float32")        # 16
    t.vector_registers               # 32
    t.cache_sizes                    # {"L1": 49152, "L2": 1048576, "L3": 33554432}
    t.can_run()                      # True: this machine executes its code

``host`` compiles with its named target's flags, not ``-march=native``: a kernel
built for ``host`` is the kernel that records keyed by the named target measured.
"""

from __future__ import annotations

import functools
import os
import platform
import shutil
from dataclasses import dataclass

import numpy as np

from . import amx

KIB, MIB = 1024, 1024 * 1024


@dataclass(frozen=True)
class _Spec:
    """The fixed parameters of a named target."""

    arch: str  # the machine (``platform.machine()``) that runs it; "any" for portable C
    vector_bits: int
    vector_registers: int
    features: tuple  # CPU flags (as /proc/cpuinfo names them) the code needs
    march: tuple  # the compiler flags that select the ISA
    caches: tuple  # (L1d, L2, L3) bytes: a typical machine of the class
    cross_cc: str | None = None  # the compiler for it on another architecture
    base: str | None = None  # the target this one extends: same machine, fewer features


# gcc 12 turns a 256-bit masked load whose mask became a constant (a guarded read in a
# loop of 8 floats, unrolled) into a full vblendps from memory: a read past the array.
# Without AVX-512VL such loads are AVX's vmaskmovps, which reads only the lanes asked
# for; the 512-bit code is the same.
AVX512_FLAGS = ("-march=x86-64-v4", "-mprefer-vector-width=512", "-mno-avx512vl")
# -march=x86-64-v3 lets gcc use every one of these (/proc/cpuinfo's names; "abm" is
# LZCNT, which a CPU without it runs as BSR: clz silently wrong), so a target compiled
# with it needs them all; x86-64-v4 adds AVX-512's F, BW, CD, DQ and VL
_X86_V3 = (
    "abm", "avx", "avx2", "bmi1", "bmi2", "cx16", "f16c", "fma", "lahf_lm", "movbe", "popcnt",
    "sse4_1", "sse4_2", "ssse3", "xsave",
)  # fmt: skip
_AVX512 = _X86_V3 + ("avx512bw", "avx512cd", "avx512dq", "avx512f", "avx512vl")
# The best targets first: "host" is the first row this CPU runs. A row with a ``base``
# is its base's machine plus dot-product instructions for int8 and bfloat16 (tensor
# intrinsics use them): the same registers, lanes and caches, a superset of features.
KNOWN = {
    "x86-amx": _Spec(
        "x86_64",
        512,
        32,
        _AVX512 + ("avx512_bf16", "avx512_vnni", "amx_tile", "amx_int8", "amx_bf16"),
        (
            *AVX512_FLAGS,
            "-mavx512vnni",
            "-mavx512bf16",
            "-mamx-tile",
            "-mamx-int8",
            "-mamx-bf16",
        ),
        # the base's caches, as a derived target's code for other dtypes is its base's
        (48 * KIB, 1 * MIB, 32 * MIB),
        "x86_64-linux-gnu-gcc",
        base="x86-avx512-bf16",
    ),
    "x86-avx512-bf16": _Spec(
        "x86_64",
        512,
        32,
        _AVX512 + ("avx512_bf16", "avx512_vnni"),
        (*AVX512_FLAGS, "-mavx512vnni", "-mavx512bf16"),
        (48 * KIB, 1 * MIB, 32 * MIB),
        "x86_64-linux-gnu-gcc",
        base="x86-avx512",
    ),
    "x86-avx512": _Spec(
        "x86_64",
        512,
        32,
        _AVX512,
        AVX512_FLAGS,
        (48 * KIB, 1 * MIB, 32 * MIB),
        "x86_64-linux-gnu-gcc",
    ),
    "x86-avx2-vnni": _Spec(
        "x86_64",
        256,
        16,
        _X86_V3 + ("avx_vnni",),
        ("-march=x86-64-v3", "-mavxvnni"),
        (32 * KIB, 512 * KIB, 16 * MIB),
        "x86_64-linux-gnu-gcc",
        base="x86-avx2",
    ),
    "x86-avx2": _Spec(
        "x86_64",
        256,
        16,
        _X86_V3,
        ("-march=x86-64-v3",),
        (32 * KIB, 512 * KIB, 16 * MIB),
        "x86_64-linux-gnu-gcc",
    ),
    "aarch64-dotprod": _Spec(
        "aarch64",
        128,
        32,
        ("asimd", "asimddp"),
        ("-march=armv8.2-a+dotprod",),
        (64 * KIB, 1 * MIB, 32 * MIB),
        "aarch64-linux-gnu-gcc",
        base="aarch64-neon",
    ),
    "aarch64-neon": _Spec(
        "aarch64",
        128,
        32,
        ("asimd",),
        ("-march=armv8-a+simd",),
        (64 * KIB, 1 * MIB, 32 * MIB),
        "aarch64-linux-gnu-gcc",
    ),
    "generic": _Spec("any", 128, 16, (), (), (32 * KIB, 512 * KIB, 8 * MIB)),
}
# The loops pypto vectorizes carry ``omp simd`` (isl proved them parallel), which these
# leave as they were. Of the rest, gcc 12.2 at -O3 vectorized some wrongly (an update
# reading a diagonal neighbour inside a time loop: 134 of 324 sizes; a reduction over a
# local copy; a producer computed inside a reduction): with these it vectorizes a loop
# pypto did not mark only where the vector code replaces the scalar loop whole (no
# alias checks, peels or epilogues), and straight-line code not at all. The templates'
# kernels vectorize the same loops as before.
GCC_VECTORIZER_LIMITS = ("-fvect-cost-model=very-cheap", "-fno-tree-slp-vectorize")
BASE_FLAGS = (
    "-O3",
    "-std=gnu11",
    "-fPIC",
    "-shared",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-ffp-contract=fast",
    "-fopenmp",
    *GCC_VECTORIZER_LIMITS,
)
# the dtypes whose code a feature may change (the dot-product instructions and what
# the C compiler may vectorize with them); a derived target's code for other dtypes is
# its base's, so it may use its base's records for them
_FEATURE_DTYPES = {
    "avx512_vnni": ("int8", "uint8", "int16"),
    "avx_vnni": ("int8", "uint8", "int16"),
    "asimddp": ("int8", "uint8"),
    "avx512_bf16": ("bfloat16",),
    "amx_tile": ("int8", "uint8", "bfloat16"),
    "amx_int8": ("int8", "uint8"),
    "amx_bf16": ("bfloat16",),
}
CACHE_LINE = 64  # bytes, on every target pypto knows
ENV_OVERRIDE = "PYPTO_TARGET"

# storage dtypes whose arithmetic (and so whose vectors) is float32
_COMPUTED_AS_F32 = ("float16", "bfloat16")


@dataclass(frozen=True)
class Target:
    """What code generation, templates, features and records know about a machine.

    ``Target("x86-avx2")`` takes the table's fixed parameters (caches per core, one
    nominal core: its code is the same on any machine); ``Target("host")`` the best
    named target this machine runs, with its own caches and cores; any
    field given explicitly wins (``Target("x86-avx2", l2_bytes=2 << 20)``).
    """

    name: str = "host"
    arch: str | None = None
    vector_bits: int | None = None
    vector_registers: int | None = None
    features: tuple | None = None
    cores: int | None = None
    l1d_bytes: int | None = None
    l2_bytes: int | None = None
    l3_bytes: int | None = None
    cflags: tuple | None = None
    is_host: bool | None = None

    def __post_init__(self):
        if not isinstance(self.name, str):  # (pt.build's target= also takes a Target, None)
            got = "a Target (use it as it is)" if isinstance(self.name, Target) else repr(self.name)
            raise TypeError(f"a target is named by a string such as 'host', got {got}")
        for f, v in _defaults(self.name).items():
            if f == "name" or getattr(self, f) is None:
                object.__setattr__(self, f, v)

    @property
    def key(self) -> str:
        """The name tuning records are keyed by: the named target the code is for."""
        return self.name

    @property
    def base(self) -> str | None:
        """The named target this one extends (the same machine with fewer features), or None."""
        spec = KNOWN.get(self.name)
        return spec.base if spec else None

    def record_keys(self, dtypes=()) -> tuple:
        """The targets whose records serve a workload over ``dtypes`` here, own first:
        the base targets follow while the features a target adds to its base change
        none of ``dtypes`` (their code is the base's)::

            Target("x86-avx512-bf16").record_keys(("float32",))  # (.. -bf16, x86-avx512)
            Target("x86-avx512-bf16").record_keys(("int8",))     # (x86-avx512-bf16,)
        """
        return record_lineage(self.key, dtypes)

    @property
    def cache_sizes(self) -> dict:
        """``{"L1": bytes, "L2": bytes, "L3": bytes}`` (L1: data cache of one core)."""
        return {"L1": self.l1d_bytes, "L2": self.l2_bytes, "L3": self.l3_bytes}

    def vector_lanes(self, dtype="float32") -> int:
        """SIMD lanes for ``dtype`` (a dtype name, or an element size in bytes).

        float16 and bfloat16 are storage types computed in float32, so they get
        float32's lanes: 16 on AVX-512, 8 on AVX2, 4 on NEON and generic.
        """
        if isinstance(dtype, (int, np.integer)):
            size = int(dtype)
        else:
            size = 4 if str(dtype) in _COMPUTED_AS_F32 else np.dtype(dtype).itemsize
        return max(1, self.vector_bits // 8 // size)

    def has(self, *features: str) -> bool:
        """Whether code for this target may use every one of these CPU features."""
        return set(features) <= set(self.features)

    def can_run(self) -> bool:
        """Whether this machine executes code built for this target."""
        return can_run(self)

    @property
    def compiler_prefix(self) -> str | None:
        """The cross compiler for this target when this machine is another architecture."""
        spec = KNOWN.get(self.name)
        if spec is None or spec.arch in ("any", platform.machine()):
            return None
        return spec.cross_cc

    def __str__(self):
        return self.name


@functools.cache
def _host_features() -> tuple:
    """The CPU's flags, less AMX's when the kernel does not enable its tiles."""
    flags = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    if "amx_tile" in flags and not amx.granted():
        flags -= {f for f in flags if f.startswith("amx_")}
    return tuple(sorted(flags))


_CACHE_FIELDS = {
    ("1", "Data"): "l1d_bytes",
    ("2", "Unified"): "l2_bytes",
    ("3", "Unified"): "l3_bytes",
}
_SIZE_UNITS = {"K": KIB, "M": MIB, "G": 1024 * MIB}


def _read(path: str) -> str:
    with open(path) as f:
        return f.read().strip()


def _cache_sizes() -> dict:
    """This machine's caches from sysfs (cpu0's view), as Target fields."""
    out = {}
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        return out
    for d in entries:
        p = os.path.join(base, d)
        try:
            level, kind, size = (_read(os.path.join(p, f)) for f in ("level", "type", "size"))
        except OSError:
            continue
        field = _CACHE_FIELDS.get((level, kind))
        if field and size:
            out[field] = int(size.rstrip("KMG")) * _SIZE_UNITS.get(size[-1], 1)
    return out


def record_lineage(name: str, dtypes=()) -> tuple:
    """``name`` and the bases whose records serve it for ``dtypes`` (see Target.record_keys)."""
    out = [name]
    spec = KNOWN.get(name)
    while spec is not None and spec.base is not None:
        base = KNOWN[spec.base]
        added = set(spec.features) - set(base.features)
        if any(d in _FEATURE_DTYPES.get(f, ()) for f in added for d in dtypes):
            break
        out.append(spec.base)
        spec = base
    return tuple(out)


def _runs_here(spec: _Spec, feats) -> bool:
    return spec.arch in ("any", platform.machine()) and set(spec.features) <= set(feats)


def host_name() -> str:
    """The best named target this machine runs, or ``$PYPTO_TARGET`` when set."""
    forced = os.environ.get(ENV_OVERRIDE, "").strip()
    if forced and forced != "host":
        if forced not in KNOWN:
            raise ValueError(
                f"{ENV_OVERRIDE}={forced!r} is not a known target; choose one of: "
                f"{', '.join(KNOWN)}"
            )
        return forced
    feats = _host_features()
    for name, spec in KNOWN.items():  # the table lists the best targets first
        if name != "generic" and _runs_here(spec, feats):
            return name
    return "generic"


@functools.cache
def _named(name: str) -> dict:
    spec = KNOWN[name]
    l1, l2, l3 = spec.caches
    return dict(
        name=name,
        arch=spec.arch,
        vector_bits=spec.vector_bits,
        vector_registers=spec.vector_registers,
        features=spec.features,
        # nominal: a named target's parameters (caches per core) are fixed, whatever
        # machine builds its code; ``host`` has this machine's cores
        cores=1,
        l1d_bytes=l1,
        l2_bytes=l2,
        l3_bytes=l3,
        cflags=BASE_FLAGS + spec.march,
        is_host=False,
    )


def _defaults(name: str) -> dict:
    if name == "host":
        return _host_defaults(host_name())
    if name not in KNOWN:
        tvm_cpu = name.split(maxsplit=1)[:1] in (["llvm"], ["c"])
        tvm = " (TVM's llvm and c targets are host here)" if tvm_cpu else ""
        raise ValueError(f"unknown target {name!r}{tvm}; choose one of: host, {', '.join(KNOWN)}")
    return _named(name)


@functools.cache
def _host_defaults(name: str) -> dict:
    """The named target's parameters on this machine: its own caches, and its
    architecture for the portable target; the CPU features stay the target's (the
    code uses those, whatever else the CPU has), and so does the architecture of any
    other (``PYPTO_TARGET=aarch64-neon`` on x86: code run under qemu)."""
    arch = KNOWN[name].arch
    vals = dict(
        _named(name), is_host=True, arch=platform.machine() or arch if arch == "any" else arch
    )
    vals.update(_cache_sizes(), cores=os.cpu_count() or 1)
    return vals


def as_target(t) -> Target:
    """A Target from a Target, a name, or None (the host)."""
    if isinstance(t, Target):
        return t
    if t is None:
        t = "host"
    if not isinstance(t, str):
        raise TypeError(f"target must be a name or pt.Target, got {t!r}")
    return Target(t)


def can_run(t: Target) -> bool:
    """Whether code for ``t`` runs on this machine: its architecture, and every CPU
    feature the code may use."""
    arch = KNOWN[t.name].arch if t.name in KNOWN else t.arch
    return arch in ("any", platform.machine()) and set(t.features) <= set(_host_features())


def missing_features(t: Target) -> list[str]:
    """The CPU features ``t``'s code needs that this machine lacks."""
    return sorted(set(t.features) - set(_host_features()))


def cross_compiler(t: Target) -> str | None:
    """The cross compiler on PATH for ``t`` (None: not installed, or not needed)."""
    prefix = t.compiler_prefix
    return shutil.which(prefix) if prefix else None
