"""Derivatives of PyTorch custom operators, reverse and forward mode, that hold under
``torch.func``.

``op.register_autograd(backward, setup_context=...)`` gives an operator a backward
that ``.backward()`` and ``torch.autograd.grad`` use, but ``torch.func.grad``,
``vjp``, ``jacrev`` and ``vmap(grad(...))`` refuse it (PyTorch wraps the formula in an
``autograd.Function`` without ``setup_context``). ``register_autograd(op, backward,
setup_context=...)`` takes the same two functions and installs the operator's
autograd kernel as PyTorch's own operators have one: at each transform level it
records the backward there and calls the operator one level down::

    torch.func.grad(lambda x: ops.gelu(x).sum())(x)

    level 1 (grad)    gelu(x1)   x1 tracks gradients: the backward is recorded here
                        |        (redispatched below autograd, gradients enabled)
    level 0           gelu(x)    the kernel itself
    backward          dx = backward(ctx, dy): gelu_backward(x1, dy1) at level 1

An operator without a ``backward`` gets a kernel that raises ``NotImplementedError``
naming it when something differentiates through it. A backward operator whose own
backward is PyTorch's (autotune's row operators: a second derivative) gives its
``definition`` too, which runs in place of the kernel under forward mode.

Forward mode (``torch.func.jvp``, ``jacfwd``, ``forward_ad``): an operator given a
``jvp`` rule computes its output's tangent with it (one given a ``definition``, a
PyTorch composition, runs that, which PyTorch differentiates: a ``jvp`` rule may not
enter a ``torch.func`` transform of its own); one with neither raises
``NotImplementedError`` when an input carries a tangent. Kernels run under forward
mode only from a kernel here that has seen the inputs' tangents (``tangents_seen``):
elsewhere (an operator PyTorch's own autograd kernel serves) the tangents would be
dropped without a word, so ``pypto.torch.run`` refuses them.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import warnings
from collections.abc import Callable

import torch
import torch.autograd.forward_ad as _forward_ad
from torch import _C

try:  # PyTorch's own machinery for an autograd kernel inside a transform level
    from torch._C._functorch import TransformType
    from torch._functorch.pyfunctorch import retrieve_all_functorch_interpreters
    from torch._functorch.utils import enable_single_level_autograd_function
    from torch.autograd.function import _SingleLevelFunction

    _AFTER_AUTOGRAD = _C._after_autograd_keyset
    _CPU = _C.DispatchKey.CPU
    _BELOW_AUTOGRAD = _C._AutoDispatchBelowAutograd
except (ImportError, AttributeError):  # pragma: no cover  (a PyTorch without them)
    _SingleLevelFunction = None


class _Call:
    """The dispatch keys and keyword-only arguments of one call (not a tensor, so
    autograd passes it through to ``forward`` untouched)."""

    __slots__ = ("keyset", "kwargs", "direct")

    def __init__(self, keyset, kwargs: dict, direct):
        self.keyset, self.kwargs, self.direct = keyset, kwargs, direct


def _with_defaults(schema, args: tuple) -> tuple:
    """``args`` with the trailing defaults the dispatcher dropped put back."""
    return args + _defaults_after(schema, len(args))


@functools.lru_cache(maxsize=1024)
def _defaults_after(schema, n: int) -> tuple:
    return tuple(a.default_value for a in schema.arguments[n:] if not a.kwarg_only)


_SEEN = contextvars.ContextVar("pypto_tangents_seen", default=False)


def tangents_seen() -> bool:
    """Whether the kernel running now was called from an autograd kernel of this
    module, which saw its inputs' forward-mode tangents (and handled them, or refused)."""
    return _SEEN.get()


@contextlib.contextmanager
def _seen():
    token = _SEEN.set(True)
    try:
        yield
    finally:
        _SEEN.reset(token)


def _forward_mode() -> bool:
    return getattr(_forward_ad, "_current_level", -1) >= 0


def _tensor(a) -> bool:
    return isinstance(a, torch.Tensor)


def _has_tangent(args) -> bool:
    return any(_tensor(a) and _forward_ad.unpack_dual(a).tangent is not None for a in args)


def _reverse_around(inputs) -> bool:
    """Whether reverse mode may differentiate the tangent being computed: a
    ``torch.func.grad`` (``vjp``, ``jacrev``) transform outside this forward-mode one,
    or inputs that track gradients. PyTorch keeps no graph of a custom operator's
    tangent, so that derivative would come out as zero."""
    outer = [i.key() for i in retrieve_all_functorch_interpreters()]
    if TransformType.Grad in outer:
        return True
    return _C.is_grad_enabled() and any(_tensor(a) and a.requires_grad for a in inputs)


def register_autograd(
    op,
    backward: Callable | None = None,
    *,
    setup_context=None,
    jvp: Callable | None = None,
    definition: Callable | None = None,
) -> None:
    """Give the custom operator ``op`` (``torch.library.custom_op``'s) its derivatives.
    Reverse mode: ``setup_context(ctx, inputs, output)`` saves what ``backward(ctx,
    *grads)`` needs, as ``op.register_autograd`` takes them, and the derivative holds
    under ``torch.func`` transforms too; ``backward=None``: differentiating through
    ``op`` raises ``NotImplementedError``. Forward mode: ``jvp(inputs, output,
    *tangents)`` returns the output's tangent (an input without one has None), or
    ``definition(*args, **kwargs)``, PyTorch operations computing what ``op`` does,
    runs in place of ``op``'s kernel where an input carries a tangent (PyTorch's
    forward mode differentiates it); with neither, an input with a tangent raises
    ``NotImplementedError``."""
    overload = getattr(op, "_opoverload", None)
    if overload is None or not hasattr(op, "register_autograd"):
        raise TypeError(
            f"register_autograd: {op!r} is not a custom operator (torch.library.custom_op's "
            "or pypto.torch.custom_op's)"
        )
    name = overload._schema.name
    if definition is not None and jvp is not None:
        raise TypeError(f"register_autograd: {name}: a jvp rule or a definition, not both")
    if backward is not None:  # PyTorch's bookkeeping of the formula (and its kernel)
        op.register_autograd(backward, setup_context=setup_context)
    if _SingleLevelFunction is None:
        return
    schema = overload._schema

    class Derivative(_SingleLevelFunction):
        @staticmethod
        def forward(ctx, *args):
            call = args[-1]
            args = args[:-1]
            # gradients and tangents on: an autograd.Function's forward runs with both
            # off, and a transform level below would then record nothing (a derivative
            # of zero, or a tangent dropped)
            with torch.enable_grad(), _forward_ad._set_fwd_grad_enabled(True), _BELOW_AUTOGRAD():
                if call.direct is not None:  # (plain CPU tensors: what redispatch ends in)
                    out = call.direct(*args, **call.kwargs)
                else:
                    out = overload.redispatch(call.keyset & _AFTER_AUTOGRAD, *args, **call.kwargs)
            if jvp is not None and _forward_mode():  # (the values, not their tangents)
                bare = [_forward_ad.unpack_dual(a).primal if _tensor(a) else a for a in args]
                ctx.primals = (_with_defaults(schema, tuple(bare)), out)
            if setup_context is not None:
                inputs = _with_defaults(schema, args)
                if call.kwargs:
                    setup_context(ctx=ctx, inputs=inputs, keyword_only_inputs=call.kwargs,
                                  output=out)  # fmt: skip
                else:
                    setup_context(ctx=ctx, inputs=inputs, output=out)
            return out

        @staticmethod
        def backward(ctx, *grads):
            if backward is None:
                raise NotImplementedError(
                    f"{name} has no derivative, so a second derivative through the "
                    "operator whose backward it is cannot be taken (its first can)"
                )
            wanted = ctx.needs_input_grad
            ctx.needs_input_grad = wanted[:-1]  # the inputs' flags, as op's formula sees
            try:
                result = backward(ctx, *grads)
            finally:
                ctx.needs_input_grad = wanted
            return (*result, None) if isinstance(result, tuple) else (result, None)

        @staticmethod
        def jvp(ctx, *tangents):
            inputs, out = ctx.primals
            if _reverse_around(inputs):
                raise NotImplementedError(
                    f"{name}: a reverse-mode derivative of its forward-mode derivative "
                    "(torch.func.grad of a jvp, or .backward() through a tangent) is not "
                    "supported; compute tangents under torch.no_grad(), or take both "
                    "derivatives in reverse mode"
                )
            pad = (None,) * (len(inputs) + 1 - len(tangents))
            # differentiable, as the forward: a transform around this one (grad of a
            # jvp, jvp of a jvp) differentiates the tangent too
            with torch.enable_grad(), _forward_ad._set_fwd_grad_enabled(True):
                return jvp(inputs, out, *tangents[:-1], *pad)

    Derivative.__name__ = Derivative.__qualname__ = f"Derivative_{name.replace('::', '_')}"

    fns, direct = _direct_kernel(op)

    def kernel(keyset, *args, **kwargs):
        forward = _forward_mode()
        below = keyset & _AFTER_AUTOGRAD
        plain = (  # CPU tensors, no forward mode: the implementation itself
            direct is not None
            and len(fns) == 1  # (no kernel registered for a device since)
            and not forward
            and below.highestPriorityTypeId() == _CPU
        )
        if plain and not (_C.is_grad_enabled() and _C._any_requires_grad(*args)):
            with _BELOW_AUTOGRAD():  # the common call: nothing to differentiate
                return direct(*args, **kwargs)
        tangents = forward and _has_tangent(args)
        if tangents and definition is not None:  # (PyTorch's forward mode takes it)
            return definition(*args, **kwargs)
        call = _Call(keyset, kwargs, direct if plain else None)
        if tangents and jvp is None:
            raise NotImplementedError(
                f"{name} has no forward-mode derivative (torch.func.jvp, jacfwd, "
                "forward_ad); differentiate in reverse mode"
            )
        with _seen() if forward else contextlib.nullcontext():
            if tangents or (_C.is_grad_enabled() and _C._any_requires_grad(*args)):
                with enable_single_level_autograd_function():
                    return Derivative.apply(*args, call)
            with _BELOW_AUTOGRAD():
                return overload.redispatch(below, *args, **kwargs)

    register_kernel(name, kernel, "Autograd")


def _direct_kernel(op) -> tuple:
    """``(kernels by device, implementation)``: the function a call of ``op`` on plain
    CPU tensors ends in, to be called without the dispatcher's trip through PyTorch's
    wrappers (2-5 us of a 20 us call of a small tensor) while ``op`` has no kernel of a
    device of its own (the dict holds only ``None``). ``(None, None)`` where PyTorch
    keeps these elsewhere: every call is redispatched."""
    fns, impl = getattr(op, "_backend_fns", None), getattr(op, "_init_fn", None)
    if not isinstance(fns, dict) or None not in fns or not callable(impl):
        return None, None
    return fns, impl


_LIBRARIES: list = []


def register_kernel(qualname: str, kernel: Callable, dispatch_key: str) -> None:
    """``kernel(keyset, *args, **kwargs)`` as operator ``qualname``'s (``"ns::op"``)
    kernel for ``dispatch_key``, in place of the one PyTorch registered there."""
    ns, op_name = qualname.split("::")
    lib = torch.library.Library(ns, "IMPL")
    with warnings.catch_warnings():  # "overriding a previously registered kernel"
        warnings.simplefilter("ignore", UserWarning)
        lib.impl(op_name, kernel, dispatch_key, with_keyset=True)
    _LIBRARIES.append(lib)  # a Library unregisters its kernels when collected
