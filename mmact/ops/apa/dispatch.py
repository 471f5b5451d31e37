"""Which implementation evaluates APA / AGLU, and the calls into each.

:func:`implementation` is the whole decision, one table; the backends in
force were decided once (:mod:`mmact.ops.backends`). Every implementation
takes the raw parameters (``kappa``, ``lambda_``, ``lambda_min``,
``channel_dim``) and clamps / expands them itself.
"""
from typing import Callable, Dict, NamedTuple, Optional

import torch
from torch import Tensor

from ...compat import forward_ad_active, is_tracing, needs_input_grad
from .. import backends
from ..checks import check_channel_dim, check_input
from ..second_derivative import refuse_second_derivative
from . import cpu
from .formula import composite, torch_forward, torch_grads
from .params import ParamLike, as_param, check_params, kernel_params
from .params import chain_to_params

__all__ = ['implementation', 'IMPLEMENTATIONS', 'FastPath', 'run']

_PLAIN_TYPES = (Tensor, torch.nn.Parameter)
_F32 = torch.float32
_C_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class Implementation(NamedTuple):
    """A forward and a backward, both of the raw parameters:
    ``forward(name, x, kappa, lam, lambda_min, channel_dim)`` and
    ``grads(name, x, grad_out, kappa, lam, lambda_min, channel_dim, needs)
    -> (grad_x, grad_kappa, grad_lambda)``."""
    forward: Callable
    grads: Callable


def _triton_forward(name, x, kappa, lam, lambda_min, channel_dim):
    from .triton import eta_forward  # imports triton
    return eta_forward(name, x, *kernel_params(kappa, lam, lambda_min),
                       channel_dim)


def _triton_grads(name, x, grad_out, kappa, lam, lambda_min, channel_dim,
                  needs):
    from .triton import eta_backward  # imports triton
    k, l = kernel_params(kappa, lam, lambda_min)  # noqa: E741
    grad_x, grad_k, grad_l = eta_backward(name, x, grad_out, k, l, channel_dim,
                                          needs)
    return (grad_x, *chain_to_params(grad_k, grad_l, kappa, lam, lambda_min))


#: The implementations an ``autograd.Function`` runs (``op`` records its own
#: C++ node; ``composite`` is differentiated by autograd).
IMPLEMENTATIONS: Dict[str, Implementation] = {
    'torch': Implementation(torch_forward, torch_grads),
    'triton': Implementation(_triton_forward, _triton_grads),
}


def implementation(x: Tensor, kappa: Tensor, lam: Tensor) -> str:
    """Which implementation evaluates APA / AGLU on ``x``:

    ========================================  ===========  ================
    call                                      runs         records
    ========================================  ===========  ================
    traced (``torch.compile``, ``torch.jit``,  ``composite`` autograd's nodes
    fake tensors, dispatch modes),                         of standard ops
    ``torch.onnx.export``, or a forward-mode
    AD level open
    a tensor the Triton settings cover (CUDA  ``triton``   one Python
    float32 / float16 / bfloat16; CPU with                 ``Function``
    ``triton='all'``)                                      node
    plain strided float32 / float16 /         ``op``       one C++ node
    bfloat16 CPU tensor, float32 CPU
    parameters, C kernels on and built
    anything else (float64, no compiler,      ``torch``    one Python
    C kernels off)                                         ``Function``
                                                           node
    ========================================  ===========  ================

    Where no gradient is wanted (``eval`` under ``no_grad``, or no input
    requires grad) no node is recorded: ``op`` skips it in C++, ``triton``
    and ``torch`` run their forward without the ``Function``.

    The C++ operator's Python entry (:class:`FastPath`) makes the ``op``
    row's checks in C++ and returns None for any other call
    (``tests/test_ops/test_apa_dispatch.py`` holds both to each other).

    Args:
        x (Tensor): The input.
        kappa (Tensor): The raw ``kappa``.
        lam (Tensor): The raw ``lambda``.

    Returns:
        str: ``'composite'``, ``'triton'``, ``'op'`` or ``'torch'``.
    """
    if is_tracing() or forward_ad_active():
        return 'composite'  # first: tracers reject reading x.layout
    if backends.takes_triton(x):
        return 'triton'
    if (x.is_cpu and x.dtype in _C_DTYPES and kappa.dtype is _F32
            and lam.dtype is _F32 and kappa.is_cpu and lam.is_cpu
            and type(x) in _PLAIN_TYPES and type(kappa) in _PLAIN_TYPES
            and type(lam) in _PLAIN_TYPES and x.layout == torch.strided
            and backends.settings().cpu_kernels
            and cpu.operator_entries() is not None):
        return 'op'
    return 'torch'


class FastPath:
    """The operators' Python entries while the settings in force send
    ``op`` calls to them: set by the first such call, dropped whenever
    :func:`mmact.ops.backends.configure` runs. :func:`mmact.ops.apa` /
    ``aglu`` hand a call to them first, outside ``torch.compile``."""
    entries: Optional[Dict[str, Callable]] = None

    @classmethod
    def drop(cls) -> None:
        cls.entries = None


backends.on_change(FastPath.drop)


class _EtaFunction(torch.autograd.Function):
    """APA / AGLU with recompute-in-backward: saves only the input and the
    raw parameters; the clamp and the expansion of a shared parameter
    happen inside, so that autograd records one node per call."""

    @staticmethod
    def forward(ctx, name: str, x: Tensor, kappa: Tensor, lam: Tensor,
                lambda_min: float, channel_dim: int, impl: str) -> Tensor:
        ctx.save_for_backward(x, kappa, lam)
        ctx.op, ctx.impl = name, impl  # not ctx.name: the node's name()
        ctx.lambda_min, ctx.channel_dim = lambda_min, channel_dim
        return IMPLEMENTATIONS[impl].forward(name, x, kappa, lam, lambda_min,
                                             channel_dim)

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        x, kappa, lam = ctx.saved_tensors
        needs = needs_input_grad(ctx, 4)[1:]
        create_graph = torch.is_grad_enabled()
        with torch.no_grad():
            grads = IMPLEMENTATIONS[ctx.impl].grads(ctx.op, x, grad_out, kappa,
                                                    lam, ctx.lambda_min,
                                                    ctx.channel_dim, needs)
        if create_graph:
            grads = refuse_second_derivative(f'mmact.ops.{ctx.op}', grads)
        return (None, *grads, None, None, None)


def run(name: str, x: Tensor, kappa: ParamLike, lambda_: ParamLike,
        lambda_min: float, channel_dim: int) -> Tensor:
    """Check the arguments, pick the implementation, call it.

    Args:
        name (str): ``'apa'`` or ``'aglu'``.
        x, kappa, lambda_, lambda_min, channel_dim: As :func:`mmact.ops.apa`.

    Raises:
        TypeError: ``x`` is not a floating-point tensor, or ``channel_dim``
            not an int axis.
        ValueError: ``lambda_min <= 0`` or a parameter count that does not
            fit the channels.
    """
    check_input(x, name)
    if not lambda_min > 0:
        raise ValueError(f'{name}: lambda_min must be > 0, got {lambda_min}')
    check_channel_dim(channel_dim, name)
    kappa = kappa if isinstance(kappa, Tensor) else as_param(kappa, x)
    lam = lambda_ if isinstance(lambda_, Tensor) else as_param(lambda_, x)
    impl = implementation(x, kappa, lam)
    if impl == 'op':
        FastPath.entries = cpu.operator_entries()
        return FastPath.entries[name](x, kappa, lam, float(lambda_min),
                                      int(channel_dim))
    check_params(x, kappa, lam, channel_dim)  # before any expansion
    if impl == 'composite':
        return composite(name, x, kappa, lam, lambda_min, channel_dim)
    if not (torch.is_grad_enabled() and
            (x.requires_grad or kappa.requires_grad or lam.requires_grad)):
        return IMPLEMENTATIONS[impl].forward(name, x, kappa, lam, lambda_min,
                                             channel_dim)
    return _EtaFunction.apply(name, x, kappa, lam, lambda_min, channel_dim,
                              impl)
