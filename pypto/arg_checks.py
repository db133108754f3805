"""Checks of a call's arguments before C sees them, and the errors a kernel reports.

Outputs a call allocates are cache-line aligned (``aligned_empty``), and returned as
PyTorch tensors when an input is one (``returned``). Every check
names the argument: an array that is not an array (``TypeError``), arrays
that overlap an output, a temporary too large for these sizes (``MemoryError``), and the
kernel's status codes turned into Python exceptions.
"""

from __future__ import annotations

import ctypes
import math
import sys

import numpy as np

from .c_helpers import MAX_BYTES
from .dtypes import numpy_dtype, value_range
from .expr import Call, Const, Var, substitute, walk
from .loop_ir import own_exprs, walk_stmts
from .simplify import simplify
from .target import CACHE_LINE

# status -(FIRST_INDEX_STATUS + k): the k-th run-time checked index (``index_checks``)
FIRST_INDEX_STATUS = 16


def index_checks(body) -> tuple:
    """The accesses a kernel checks at run time (``checked_index`` calls, by their
    note), each once, in the order of the loop nest ``body``: the status a failed check
    reports is its position here (``index_status``)."""
    notes = {}
    for s in walk_stmts(body):
        for e in own_exprs(s):
            for x in walk(e):
                if isinstance(x, Call) and x.name == "checked_index":
                    notes.setdefault(x.note, None)
    return tuple(notes)


def index_status(notes: tuple, note: str) -> int:
    """The status the kernel reports when the check of ``note`` fails."""
    return -(FIRST_INDEX_STATUS + notes.index(note))


def raise_status(name: str, status: int, notes: tuple = ()):
    k = -status - FIRST_INDEX_STATUS
    if 0 <= k < len(notes):
        what = notes[k] or "an index read from data or not affine"
        raise IndexError(f"{name}: {what} is out of range; the outputs are incomplete")
    if status == -1:
        raise MemoryError(f"{name}: could not allocate its temporary buffers")
    if status == -3:
        raise MemoryError(f"{name}: the byte size of a temporary buffer overflows for these sizes")
    if status == -4:
        raise ZeroDivisionError(
            f"{name}: an integer division by a divisor computed at run time found 0; "
            "the outputs are incomplete"
        )
    if status == -2:
        raise IndexError(
            f"{name}: an index read from data (such as X[i] in H[X[i]]) or not affine "
            "is out of range; the outputs are incomplete"
        )
    raise RuntimeError(f"{name}: the kernel failed with status {status}")


def check_temporary(name: str, t, values: dict):
    # t: a module.Temp (its name, element bytes and shape)
    """MemoryError before the call when a temporary buffer's byte size cannot be had."""
    nbytes = t.elem_bytes
    for d in t.shape:
        v = simplify(substitute(d, values))
        nbytes *= max(v.value, 0) if isinstance(v, Const) else 1
    if nbytes > MAX_BYTES:
        raise MemoryError(f"{name}: temporary buffer {t.name} would need {nbytes} bytes")


def check_output_bytes(kernel: str, name: str, sizes, elem_bytes: int) -> None:
    """MemoryError before allocating an output of ``sizes`` that cannot be had (counted
    in Python's integers: numpy's int64 product wraps)."""
    nbytes = math.prod(sizes) * elem_bytes
    if nbytes > MAX_BYTES:
        raise MemoryError(f"{kernel}: output {name} of shape {tuple(sizes)} would need "
                          f"{nbytes} bytes")  # fmt: skip


def provenance(want, bound: dict) -> str:
    """``", with n = 4 from argument C"``: where the sizes in expression ``want`` came
    from (``bind_sizes``' ``bound``), or ""."""
    used = {v for v in walk(want) if isinstance(v, Var)} if not isinstance(want, int) else set()
    said = [f"{v.name} = {x} from argument {src}" for v, (x, src) in bound.items() if v in used]
    return f", with {', '.join(said)}" if said else ""


def aligned_empty(shape: tuple, dtype) -> np.ndarray:
    """An uninitialized array whose data starts on a cache line (numpy's start 16 bytes
    into one): the outputs a module allocates, so that whole-vector and tile stores of
    their rows do not straddle two lines."""
    dt = np.dtype(dtype)
    n = math.prod(shape) * dt.itemsize
    raw = np.empty(n + CACHE_LINE, np.uint8)
    start = -raw.ctypes.data % CACHE_LINE
    return raw[start : start + n].view(dt).reshape(shape)


def stand_in(a: np.ndarray, name: str, checked: bool) -> np.ndarray:
    """What a kernel gets for an array of no elements. No proven access reaches an empty
    array, so a kernel without run-time index checks gets one zeroed element. With
    ``checked`` ones, an access whose data index failed its check goes on at index 0
    in that dimension (the call then raises IndexError): it gets a zeroed buffer of the
    array's shape with every empty dimension 1, where such accesses land, not outside
    the caller's array. (Zeroed by calloc: a large one costs no memory until touched;
    one too large for the address space is a ``MemoryError`` naming the argument.)"""
    if not checked:
        return np.zeros(1, a.dtype)
    shape = tuple(max(d, 1) for d in a.shape)
    try:
        return np.zeros(shape, a.dtype)
    except (MemoryError, ValueError):
        raise MemoryError(
            f"argument {name} is empty, but the kernel checks data-dependent indices at run "
            f"time and needs a stand-in of shape {shape} for it, which cannot be allocated"
        ) from None


def aligned_copy(a: np.ndarray) -> np.ndarray:
    """``a`` copied into an array that starts on a cache line (``aligned_empty``)."""
    out = aligned_empty(a.shape, a.dtype)
    out[...] = a
    return out


def returned(made: list, inputs) -> object:
    """The outputs a call allocated, as it returns them: one, or a tuple of several;
    PyTorch tensors sharing their memory when an input was a PyTorch tensor (as a
    torch function returns tensors), else numpy arrays."""
    torch = next((t for t in map(_torch_of, inputs) if t is not None), None)
    if torch is not None:
        made = [_as_tensor(torch, a) for a in made]
    return made[0] if len(made) == 1 else tuple(made)


def _as_tensor(torch, a: np.ndarray):
    """``a`` as a PyTorch tensor without copying (bfloat16 through its bits)."""
    if a.dtype == numpy_dtype("bfloat16"):
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def fmt_shape(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ")"


def bind_sizes(arrays, specs) -> dict:
    """Size variables bound from the arrays' shapes: Var -> (value, argument name);
    ``specs`` are ``(name, dtype, shape)`` per array. Dtypes, ranks and the agreement of
    each variable's dimensions are checked on the way."""
    bound: dict = {}
    for arr, (name, dt, shape) in zip(arrays, specs):
        if arr.dtype != dt:
            raise TypeError(f"argument {name}: dtype {arr.dtype}, expected {dt}")
        if arr.ndim != len(shape):
            raise ValueError(
                f"argument {name}: {arr.ndim} dimension(s), expected "
                f"{len(shape)} (shape {fmt_shape(shape)})"
            )
        for d, (want, got) in enumerate(zip(shape, arr.shape)):
            if isinstance(want, Var):
                if want in bound and bound[want][0] != got:
                    v, src = bound[want]
                    raise ValueError(
                        f"argument {name}: dimension {d} is {got}, but {want.name} = {v} "
                        f"from argument {src}"
                    )
                bound.setdefault(want, (got, name))
    return bound


def check_size_dtypes(bound: dict) -> None:
    """Refuse a size beyond its variable's dtype (an int32 ``pt.var`` of 2**31 would wrap
    in the kernel's int32 arithmetic); ``bound``: ``bind_sizes``' with the passed ones."""
    for v, (x, src) in bound.items():
        if x > value_range(v.dtype)[1]:
            where = f"argument {src}" if src != v.name else f"argument {v.name}"
            raise ValueError(f"{where}: {v.name} = {x} does not fit its dtype {v.dtype}")


def bind_passed(bound: dict, size_vars, passed: dict) -> dict:
    """``bound`` (``bind_sizes``') with the sizes a call passes as arguments (``passed``:
    name -> value, see ``pypto.scalar_args``); one that a shape binds too must agree, and
    each must fit its variable's dtype (``check_size_dtypes``)."""
    for v in size_vars:
        if v.name not in passed:
            continue
        x = passed[v.name]
        if v in bound and bound[v][0] != x:
            got, src = bound[v]
            raise ValueError(f"argument {v.name}: {x}, but argument {src}'s shape makes it {got}")
        bound.setdefault(v, (x, v.name))
    check_size_dtypes(bound)
    return bound


def expected_dim(name: str, d: int, want, values: dict, bound: dict, w=None) -> int:
    """Dimension ``d`` of argument ``name`` (the expression ``want``) for the bound sizes
    (``values``: Var -> Const; ``bound``: ``bind_sizes``'); ``ValueError`` when they do
    not determine it, or make it negative (``n - 2`` with ``n = 1``). ``w``: ``want``
    with the sizes substituted, where the caller has it already."""
    w = simplify(substitute(want, values)) if w is None else w
    if not isinstance(w, Const):
        raise ValueError(f"argument {name}: cannot determine dimension {d} ({want})")
    if w.value < 0:
        sizes = ", ".join(f"{v.name} = {x} (from argument {src})" for v, (x, src) in bound.items())
        raise ValueError(
            f"argument {name}: dimension {d} ({want}) would be {w.value} with {sizes}: "
            "sizes this small do not fit the kernel"
        )
    return w.value


def _torch_of(a):
    """PyTorch's module when ``a`` is one of its tensors (loaded then: nothing is
    imported), else None."""
    torch = sys.modules.get("torch")
    return torch if torch is not None and isinstance(a, torch.Tensor) else None


def _check_torch_tensor(torch, a, name: str) -> None:
    """``TypeError`` for a PyTorch tensor whose memory is not its values, or that
    autograd tracks (the same for every dtype: bfloat16's goes through a view of its
    bits, which DLPack's own refusals would not see)."""
    if a.layout != torch.strided:
        raise TypeError(f"argument {name}: a {a.layout} tensor; pass t.to_dense()")
    if a.is_neg():  # lazy negation (z.conj().imag): DLPack exports the values unnegated
        raise TypeError(
            f"argument {name}: a tensor with its negative bit set (a lazy negation, as "
            "z.conj().imag gives); pass t.resolve_neg()"
        )
    if a.requires_grad:
        raise TypeError(
            f"argument {name}: a tensor that requires grad (the kernel's reads and writes "
            "bypass autograd); pass t.detach()"
        )


def as_array(a, name: str) -> np.ndarray:
    """A numpy view of an argument: an ndarray as it is, anything with ``__dlpack__``
    (a PyTorch CPU tensor, ...) through DLPack, without copying; a PyTorch bfloat16
    tensor (which numpy's DLPack lacks) through its bits, as ml_dtypes' bfloat16."""
    if type(a) is np.ndarray:  # the common case first: a call's checks cost per argument
        return a
    if isinstance(a, np.ma.MaskedArray):
        raise TypeError(
            f"argument {name}: a masked array (the kernel would ignore its mask); pass "
            "x.filled(value) or x.data"
        )
    if isinstance(a, np.ndarray):
        return a
    torch = _torch_of(a)
    if torch is not None:
        _check_torch_tensor(torch, a, name)
        if a.dtype == torch.bfloat16:
            return as_array(a.view(torch.int16), name).view(numpy_dtype("bfloat16"))
    if hasattr(a, "__dlpack__"):
        try:
            return np.from_dlpack(a)
        except Exception as e:  # noqa: BLE001 - report any exporter failure the same way
            raise TypeError(f"argument {name}: cannot view it through __dlpack__: {e}") from None
    raise TypeError(f"argument {name}: expected a numpy array, got {type(a).__name__}")


def check_tensor_writes(args, specs, written) -> None:
    """Refuse writing a PyTorch inference tensor outside inference mode (as PyTorch
    refuses ``t.add_(1)`` there)."""
    for a, (name, _, _), w in zip(args, specs, written):
        torch = _torch_of(a) if w else None
        if torch is not None and a.is_inference() and not torch.is_inference_mode_enabled():
            raise ValueError(
                f"argument {name} is an inference tensor (made under torch.inference_mode()) "
                "and the kernel writes it: call it inside inference mode, or pass t.clone()"
            )


def bump_versions(args, written) -> None:
    """Move the version counters of the PyTorch tensors a call wrote, as PyTorch's own
    in-place operations do: autograd then refuses a backward pass through values the
    kernel overwrote, and caches keyed to the counter (the MoE operator's packed
    weights) see the change."""
    for a, w in zip(args, written):
        torch = _torch_of(a) if w else None
        if torch is not None and not a.is_inference():  # those have no counter
            torch.autograd.graph.increment_version(a)


def _pointer_reader():
    """A reader of an ndarray's data pointer ten times faster than ``a.ctypes.data``
    (which builds an object per call, about 0.8 us): the array object's ``data`` field,
    right after the object header (numpy's ``PyArray_DATA``), read once checked against
    ``.ctypes.data`` on views, transposes and offsets; ``.ctypes.data`` where not equal."""
    offset = object.__basicsize__
    field = ctypes.c_size_t.from_address

    def fast(a):
        return field(id(a) + offset).value

    base = np.arange(24.0).reshape(4, 6)
    samples = (base, base[1:, 2:], base.T, base[::2], np.ones(3, np.int8)[1:])
    if all(fast(a) == a.ctypes.data for a in samples):
        return fast
    return lambda a: a.ctypes.data


data_pointer = _pointer_reader()


def repeat_call(args, n: int, checked: dict, outs: tuple) -> list | None:
    """The C arguments of a call like one checked before (a kernel without scalar
    parameters): ``n`` arguments, each a C-contiguous, non-empty numpy array, of the
    shapes and dtypes of an earlier call whose checks passed (``checked``: those ->
    the sizes), the outputs (at ``outs``) writeable and overlapping nothing. None for
    any other call, which the full checks take (and name what is wrong): a call costs
    about 2.5 us, not 7."""
    if len(args) != n:
        return None
    for a in args:
        if type(a) is not np.ndarray or not a.size or not a.flags.c_contiguous:
            return None
    sizes = checked.get((tuple((a.shape, a.dtype) for a in args), ()))
    if sizes is None:
        return None
    at = [data_pointer(a) for a in args]
    for i in outs:
        out, lo = args[i], at[i]
        if not out.flags.writeable:
            return None
        hi = lo + out.nbytes
        if any(j != i and at[j] < hi and lo < at[j] + b.nbytes for j, b in enumerate(args)):
            return None
    return [*at, *sizes]


def plain_tensor(torch, a, tracked: bool = False) -> bool:
    """Whether PyTorch tensor ``a`` may go to a kernel as its data pointer, with no
    check but its shape's: on the CPU, dense, C-contiguous, not empty, no lazy negation
    or conjugation, not tracked by autograd (``tracked``: it may be, where the caller
    keeps autograd out of it)."""
    return (
        a.is_cpu
        and a.layout is torch.strided
        and a.is_contiguous()
        and a.numel() > 0
        and not ((a.requires_grad and not tracked) or a.is_neg() or a.is_conj())
    )


def torch_key(args, tracked: bool = False) -> tuple | None:
    """``repeat_torch_call``'s key of a call whose arguments are all plain PyTorch
    tensors (``plain_tensor``): their shapes and dtypes; else None."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    for a in args:
        if type(a) not in (torch.Tensor, torch.nn.Parameter) or not plain_tensor(torch, a, tracked):
            return None
    return tuple((a.shape, a.dtype) for a in args)


def repeat_torch_call(args, n: int, checked: dict, outs: tuple, tracked: bool = False):
    """``repeat_call`` for PyTorch tensors: ``n`` plain tensors (``torch_key``) of the
    shapes and dtypes of an earlier call whose checks passed, the outputs (at ``outs``)
    no inference tensors and overlapping nothing; the C arguments, or None. The caller
    moves the outputs' version counters (``bump_versions``). About 5 us a call, not 16."""
    if len(args) != n or not checked:
        return None
    sizes = checked.get(torch_key(args, tracked))
    if sizes is None:
        return None
    at = [a.data_ptr() for a in args]
    ends = [p + a.numel() * a.element_size() for p, a in zip(at, args)]
    for i in outs:
        if args[i].is_inference():  # (refused outside inference mode: the full checks)
            return None
        if any(j != i and at[j] < ends[i] and at[i] < ends[j] for j in range(n)):
            return None
    return [*at, *sizes]


def check_overlap(arrays, specs, written, addresses):
    """``ValueError`` where an argument written overlaps another (``addresses``: the
    arrays' data pointers, taken once per call: each ``.ctypes.data`` costs about a
    microsecond)."""
    spans = []
    for arr, (name, _, _), w, p in zip(arrays, specs, written, addresses):
        if arr.nbytes:
            spans.append((p, p + arr.nbytes, name, w))
    for i, (a0, a1, an, aw) in enumerate(spans):
        for b0, b1, bn, bw in spans[i + 1 :]:
            if (aw or bw) and a0 < b1 and b0 < a1:
                raise ValueError(
                    f"arguments {an} and {bn} overlap in memory; a kernel's "
                    "outputs must not alias its other arguments"
                )


def output_shapes(kernel: str, arrays, inputs, specs, written, size_vars, passed: dict) -> list:
    """The shapes of the outputs (``specs`` flagged ``written``) that a call of the
    input ``arrays`` (of ``inputs``, the other specs; and the ``passed`` sizes)
    allocates, each checked to fit in memory."""
    bound = bind_passed(bind_sizes(arrays, inputs), size_vars, passed)
    values = {v: Const(val, "int64") for v, (val, _) in bound.items()}
    shapes = []
    for (name, dt, shape), w in zip(specs, written):
        if not w:
            continue
        dims = [simplify(substitute(d, values)) for d in shape]
        unknown = [str(d) for d in dims if not isinstance(d, Const)]
        if unknown:
            raise ValueError(
                f"output {name}: its shape {fmt_shape(shape)} depends on "
                f"{', '.join(unknown)}, which no input binds; pass {name} preallocated"
            )
        sizes = [
            expected_dim(name, d, x, values, bound, w) for d, (x, w) in enumerate(zip(shape, dims))
        ]
        check_output_bytes(kernel, name, sizes, np.dtype(dt).itemsize)
        shapes.append(tuple(sizes))
    return shapes
