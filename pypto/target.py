"""Hardware targets: ISA, vector width, caches, cores and compiler flags.

``Target("host")`` detects this machine (CPU flags from /proc/cpuinfo, cache
sizes from sysfs); the named targets describe machines that may not be this
one, for which ``pt.build(..., emit_only=True)`` returns C without compiling.
"""

from __future__ import annotations

import functools
import os
import platform
from dataclasses import dataclass, replace

# name -> (arch, vector bits, required CPU features, -march flags)
KNOWN = {
    "x86-avx512": (
        "x86_64",
        512,
        ("avx512f", "avx2", "fma"),
        ("-march=x86-64-v4", "-mprefer-vector-width=512"),
    ),
    "x86-avx2": ("x86_64", 256, ("avx2", "fma"), ("-march=x86-64-v3",)),
    "aarch64-neon": ("aarch64", 128, ("asimd",), ("-march=armv8-a+simd",)),
    "generic": ("any", 128, (), ()),
}
BASE_FLAGS = (
    "-O3",
    "-std=gnu11",
    "-fPIC",
    "-shared",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-ffp-contract=fast",
    "-fopenmp",
)


@dataclass(frozen=True)
class Target:
    """What code generation and the tuner know about a machine.

    ``Target("host")`` fills every field from this machine; ``Target("x86-avx2")``
    from the table; any field given explicitly wins.
    """

    name: str = "host"
    arch: str | None = None
    vector_bits: int | None = None
    features: tuple | None = None
    cores: int | None = None
    l1d_bytes: int | None = None
    l2_bytes: int | None = None
    l3_bytes: int | None = None
    cflags: tuple | None = None
    is_host: bool | None = None

    def __post_init__(self):
        for f, v in _defaults(self.name).items():
            if f == "name" or getattr(self, f) is None:
                object.__setattr__(self, f, v)

    @property
    def key(self) -> str:
        """A stable identifier for tuning records: the ISA class of the machine."""
        return self.name

    def vector_lanes(self, dtype_bytes: int) -> int:
        return max(1, self.vector_bits // 8 // dtype_bytes)

    def with_flags(self, *flags) -> Target:
        return replace(self, cflags=self.cflags + tuple(flags))

    def __str__(self):
        return self.name


def _host_features() -> tuple:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return tuple(sorted(set(line.split(":", 1)[1].split())))
    except OSError:
        pass
    return ()


def _cache_sizes() -> dict:
    out = {}
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for d in sorted(os.listdir(base)):
            p = os.path.join(base, d)
            try:
                level = open(os.path.join(p, "level")).read().strip()
                kind = open(os.path.join(p, "type")).read().strip()
                size = open(os.path.join(p, "size")).read().strip()
            except OSError:
                continue
            mult = {"K": 1024, "M": 1024 * 1024}.get(size[-1], 1)
            val = int(size.rstrip("KM")) * mult
            if level == "1" and kind == "Data":
                out["l1d_bytes"] = val
            elif level == "2":
                out["l2_bytes"] = val
            elif level == "3":
                out["l3_bytes"] = val
    except OSError:
        pass
    return out


def host_name() -> str:
    """The best named target this machine can run."""
    feats = set(_host_features())
    arch = platform.machine()
    for name, (tarch, _, need, _) in KNOWN.items():
        if name != "generic" and tarch == arch and set(need) <= feats:
            return name
    return "generic"


_CACHES = {"l1d_bytes": 32 * 1024, "l2_bytes": 512 * 1024, "l3_bytes": 16 * 1024 * 1024}


@functools.cache
def _defaults(name: str) -> dict:
    host = host_name()
    if name == "host":
        arch, bits, _, _ = KNOWN[host]
        vals = dict(
            name=host,
            arch=arch if arch != "any" else platform.machine(),
            vector_bits=bits,
            features=_host_features(),
            cores=os.cpu_count() or 1,
            # the named target's flags, not -march=native: the host compiles exactly as
            # the target its tuning records are keyed by
            cflags=BASE_FLAGS + KNOWN[host][3],  # the named target's flags: records stay valid
            is_host=True,
        )
        vals.update({**_CACHES, **_cache_sizes()})
        return vals
    if name not in KNOWN:
        raise ValueError(f"unknown target {name!r}; choose one of: host, {', '.join(KNOWN)}")
    arch, bits, need, march = KNOWN[name]
    return dict(
        name=name,
        arch=arch,
        vector_bits=bits,
        features=need,
        cores=os.cpu_count() or 1,
        cflags=BASE_FLAGS + march,
        is_host=(name == host),
        **_CACHES,
    )


def as_target(t) -> Target:
    if isinstance(t, Target):
        return t
    if t is None:
        t = "host"
    if not isinstance(t, str):
        raise TypeError(f"target must be a name or pt.Target, got {t!r}")
    return Target(t)


def can_run(t: Target) -> bool:
    """Whether code for ``t`` runs on this machine."""
    if t.is_host or t.name == "generic":
        return True
    arch = KNOWN.get(t.name, ("?",))[0]
    return arch == platform.machine() and set(t.features) <= set(_host_features())
