"""Plans: an operator's call on plain tensors, replayed from its arguments' shapes.

An operator's body checks its arguments, finds its module and allocates the outputs
before the kernel runs: 15-35 us of Python for a small tensor, which the kernel itself
may take 1 us for. Where everything the body decides follows from the arguments'
shapes, dtypes and scalar values (never from tensor values), ``planned(body)`` keeps,
per such key, what the body's one kernel call was, and replays it:

    rms_norm(x, w, 1e-6)          # first call of (1, 4096) float32: the body runs
        checks, rows/cols, module("rmsnorm", (1, 4096, 1e-6)), empty((1, 4096))
        run(mod, [(x.reshape(1, 4096), "x"), (w, "weight")], [y])  -> noted
        return y                  # a plan: kernel input 0 = x, 1 = w; output y, returned
    rms_norm(x2, w2, 1e-6)        # same key: the plan
        y = torch.empty((1, 4096)); mod's kernel(x2, w2, y, sizes); return y

A call is planned only where its arguments are plain (``plain_tensor``: CPU, dense,
contiguous, not empty) tensors and ``None``/bool/int/float/str scalars, and the body
made exactly one ``run``, each of whose inputs has exactly one argument's memory
(the argument itself or a same-size view of it) and whose outputs are returned as
they are (or as same-size views). Anything else (a copy made of an argument, an
output computed further, two kernels) runs the body every time. A plan is never made
under forward-mode AD; ``scope()`` keys them by what else chooses the module (the
records in scope), and ``forget()`` drops them all (a module cache cleared).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable

import torch
import torch.autograd.forward_ad as _forward_ad

from .arg_checks import plain_tensor, raise_status
from .torch_buffers import POOL_MIN_BYTES, empty

_SCALARS = frozenset({type(None), bool, int, float, str})
_TENSORS = frozenset({torch.Tensor, torch.nn.Parameter})
MAX_PLANS = 256  # per operator; then they are dropped and made again
_local = threading.local()
_ALL_PLANS: list[dict] = []  # every planned operator's plans (``forget``)


def plan_key(args) -> tuple | None:
    """The key of a call of ``args``: each tensor's shape and dtype, each scalar's
    type and value; None where an argument is anything else, or a tensor not plain."""
    key = []
    for a in args:
        t = type(a)
        if t in _TENSORS:
            if not plain_tensor(torch, a, tracked=True):
                return None
            key.append((a.shape, a.dtype))
        elif t in _SCALARS:
            key.append((t, a))
        else:
            return None
    return tuple(key)


def note_run(mod, tensors: list, n_inputs: int, sizes) -> None:
    """What ``pypto.torch.run`` tells the recording of the call around it (if any): the
    module, its tensors (inputs first), and the size arguments its checks passed
    (None where it kept none)."""
    runs = getattr(_local, "runs", None)
    if runs is not None:
        runs.append((mod, list(tensors), n_inputs, sizes))


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` are the same elements in the same order: one memory,
    size and dtype, both contiguous."""
    return (
        a.data_ptr() == b.data_ptr()
        and a.numel() == b.numel()
        and a.dtype == b.dtype
        and a.is_contiguous()
        and b.is_contiguous()
    )


def _only(t: torch.Tensor, among) -> int | None:
    hits = [k for k, a in among if isinstance(a, torch.Tensor) and _same(a, t)]
    return hits[0] if len(hits) == 1 else None


class Plan:
    """A call to replay: the module, which argument each kernel input is, the outputs'
    shapes and dtypes (as returned), which are returned, and the size arguments."""

    __slots__ = ("mod", "ins", "outs", "ret", "sizes", "single")

    def __init__(self, mod, ins, outs, ret, sizes, single):
        self.mod, self.ins, self.ret, self.sizes, self.single = mod, ins, ret, sizes, single
        # (shape, dtype, pooled): small outputs straight from torch.empty
        self.outs = tuple(
            (tuple(sh), dt, sh.numel() * dt.itemsize >= POOL_MIN_BYTES) for sh, dt in outs
        )

    def __call__(self, args):
        outs = [empty(sh, dt) if big else torch.empty(sh, dtype=dt) for sh, dt, big in self.outs]
        tensors = [args[i] for i in self.ins] + outs
        cargs = [t.data_ptr() for t in tensors]
        cargs += self.sizes
        status = self.mod._invoke(cargs, tensors)
        if status != 0:
            raise_status(self.mod.name, status, self.mod.signature.index_checks)
        if self.single:
            return outs[self.ret[0]]
        return tuple(outs[k] for k in self.ret)


def make_plan(args, runs: list, result) -> Plan | None:
    """The plan of a body's call of ``args`` that ran ``runs`` and returned ``result``,
    or None where it cannot be replayed from the key alone (see the module's doc)."""
    if len(runs) != 1 or runs[0] is None:
        return None
    mod, tensors, n_in, sizes = runs[0]
    if sizes is None:
        return None
    ins = [_only(t, enumerate(args)) for t in tensors[:n_in]]
    single = isinstance(result, torch.Tensor)
    results = (result,) if single else result
    if None in ins or not isinstance(results, tuple):
        return None
    outs = tensors[n_in:]
    ret = []
    for r in results:
        k = _only(r, enumerate(outs)) if isinstance(r, torch.Tensor) else None
        if k is None or k in ret:
            return None
        ret.append(k)
    shapes = [o.shape for o in outs]
    for r, k in zip(results, ret):
        shapes[k] = r.shape
    return Plan(mod, tuple(ins), [(s, o.dtype) for s, o in zip(shapes, outs)], tuple(ret),
                list(sizes), single)  # fmt: skip


def planned(body: Callable, scope: Callable[[], object] | None = None) -> Callable:
    """``body`` (an operator's implementation, positional arguments) with its calls
    planned (see the module's doc); ``scope()``: what else the body's choices depend on
    (hashable, part of the key), where anything does."""
    plans: dict = {}
    _ALL_PLANS.append(plans)

    @functools.wraps(body)
    def op(*args, **kwargs):
        outer = getattr(_local, "runs", None)
        if outer is not None:  # inside another operator's recording: its plan is off
            outer.append(None)
        if kwargs or _forward_ad._current_level >= 0:
            return body(*args, **kwargs)
        key = plan_key(args)
        if key is None:
            return body(*args)
        if scope is not None:
            key = (key, scope())
        plan = plans.get(key)
        if plan is not None:
            return plan(args)
        _local.runs = runs = []
        try:
            result = body(*args)
        finally:
            _local.runs = outer
        plan = make_plan(args, runs, result)
        if plan is not None:
            if len(plans) >= MAX_PLANS:  # (scopes come and go: the oldest keys, mostly)
                plans.clear()
            plans[key] = plan
        return result

    return op


def forget() -> None:
    """Drop every operator's plans (their modules may be rebuilt differently now)."""
    for plans in _ALL_PLANS:
        plans.clear()
