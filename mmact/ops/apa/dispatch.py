"""Which implementation evaluates APA / AGLU, and the calls into each.

:func:`implementation` is the whole decision, one table, and
:func:`rebuilt_implementation` its rows for the backward at a rebuilt
input; :class:`OpRowCache` remembers the ``op`` row's entries. The
backends in force were decided once (:mod:`mmact.ops.backends`). Every
implementation takes the raw parameters (``kappa``, ``lambda_``,
``lambda_min``, ``channel_dim``) and clamps / expands them itself.
"""
from typing import Callable, Dict, Optional

import torch
from torch import Tensor

from .. import backends, cuda_build
from ..checks import check_channel_dim, check_input
from ..table import Implementation, wants_composite
from ..table import run as run_fused
from . import cpu
from .formula import composite, torch_grads
from .params import ParamLike, as_param, check_params

__all__ = [
    'implementation', 'rebuilt_implementation', 'IMPLEMENTATIONS',
    'OpRowCache', 'run'
]

_PLAIN_TYPES = (Tensor, torch.nn.Parameter)
_F32 = torch.float32
_C_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _triton_forward(x, kappa, lam, name, lambda_min, channel_dim):
    from .triton import eta_forward  # imports triton
    return eta_forward(name, x, kappa, lam, lambda_min, channel_dim)


def _triton_grads(grad_out, needs, x, kappa, lam, name, lambda_min,
                  channel_dim):
    # the kernels clamp lambda and write the raw parameters' gradients
    from .triton import eta_backward  # imports triton
    return eta_backward(name, x, grad_out, kappa, lam, lambda_min,
                        channel_dim, needs)


#: The implementations :class:`mmact.ops.table.FusedFunction` runs (``op``
#: records its own C++ node; ``composite`` is differentiated by autograd),
#: on ``(x, kappa, lam, name, lambda_min, channel_dim)``.
IMPLEMENTATIONS: Dict[str, Implementation] = {
    'torch': Implementation(composite, torch_grads),
    'triton': Implementation(_triton_forward, _triton_grads),
}


def implementation(x: Tensor, kappa: Tensor, lam: Tensor) -> str:
    """Which implementation evaluates APA / AGLU on ``x``:

    ========================================  ===========  ================
    call                                      runs         records
    ========================================  ===========  ================
    traced (``torch.compile``, ``torch.jit``,  ``composite`` autograd's nodes
    fake tensors, dispatch modes),                         of standard ops
    ``torch.onnx.export``, a forward-mode
    AD level open, or ``composite=True``
    (:func:`~mmact.ops.table.wants_composite`)
    plain strided float32 / float16 /         ``op``       one C++ node
    bfloat16 CUDA tensor, float32
    parameters on its device,
    ``MMACT_CUDA_KERNELS=1`` and the CUDA
    kernels built (:func:`.cpu.cuda_takes`)
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

    The ``op`` row's cache (:class:`OpRowCache`): once a call took the
    ``op`` row, :func:`mmact.ops.apa` / ``aglu`` hand each call to the C++
    operator's Python entry first, which makes this row's checks in C++
    and returns None for any other call, which then comes here
    (``tests/test_ops/test_apa/test_dispatch.py`` holds both to each
    other).

    Args:
        x (Tensor): The input.
        kappa (Tensor): The raw ``kappa``.
        lam (Tensor): The raw ``lambda``.

    Returns:
        str: ``'composite'``, ``'triton'``, ``'op'`` or ``'torch'``.
    """
    if wants_composite():
        return 'composite'  # first: tracers reject reading x.layout
    if (x.is_cuda and backends.settings().cuda_kernels
            and cpu.cuda_takes(x, kappa, lam)):
        return 'op'
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


class OpRowCache:
    """The cache of :func:`implementation`'s ``op`` row: the operators'
    Python entries while the settings in force send ``op`` calls to them
    (``entries``, set by the first such call, dropped whenever
    :func:`mmact.ops.backends.configure` runs). :func:`mmact.ops.apa` /
    ``aglu`` hand a call to them first, outside ``torch.compile``; an
    entry declines with None what the row would not take."""
    entries: Optional[Dict[str, Callable]] = None

    @classmethod
    def drop(cls) -> None:
        cls.entries = None


backends.on_change(OpRowCache.drop)


def _rows_or_channels(t: Optional[Tensor], x: Tensor, rows: bool) -> bool:
    """Whether ``t`` is None or shaped (1, C, 1, ...) or, with ``rows``,
    (N, C, 1, ...) against ``x`` (N, C, ...)."""
    if t is None:
        return True
    return (t.dim() == x.dim() and t.shape[1] == x.shape[1]
            and all(s == 1 for s in t.shape[2:])
            and (t.shape[0] == 1 or rows and t.shape[0] == x.shape[0]))


def rebuilt_implementation(grad_out: Tensor,
                           kappa: Tensor,
                           lam: Tensor,
                           channel_dim: int,
                           src: Tensor,
                           scale: Optional[Tensor] = None,
                           shift: Optional[Tensor] = None,
                           other: Optional[Tensor] = None,
                           other_scale: Optional[Tensor] = None) -> str:
    """Which implementation computes the backward at an input rebuilt from
    ``(src, scale, shift, other, other_scale)``
    (:func:`mmact.ops.apa.rebuilt_backward`):

    ========================================  ===========================
    call                                      runs
    ========================================  ===========================
    (N, C, ...) tensors of one shape,         ``src``'s row of
    coefficients per channel (``scale`` also  :func:`implementation` if
    per (n, c) row), parameters shared or     it is ``triton`` (and
    along dim 1                               ``grad_out`` and ``other``
                                              take it too) or ``op``
                                              (float32 sources; on CUDA
                                              sources of ``src``'s
                                              dtype): the kernel
                                              rebuilds the input per
                                              element
    anything else                             ``rebuild``: the input
                                              rebuilt in torch, then the
                                              backward of its row
    ========================================  ===========================

    Args:
        grad_out (Tensor): The gradient of the activation's output.
        kappa, lam (Tensor): The raw parameters.
        channel_dim (int): The axis per-channel parameters follow.
        src, scale, shift, other, other_scale: The input's sources (see
            :func:`mmact.ops.apa.rebuild_input`).

    Returns:
        str: ``'triton'``, ``'op'`` or ``'rebuild'``.
    """
    per_channel = max(kappa.numel(), lam.numel()) > 1
    if src.dim() < 2 or per_channel and channel_dim % src.dim() != 1:
        return 'rebuild'
    if any(t is not None and t.shape != src.shape for t in (grad_out, other)):
        return 'rebuild'
    coefs = ((scale, True), (shift, False), (other_scale, False))
    if not all(_rows_or_channels(t, src, rows) for t, rows in coefs):
        return 'rebuild'
    impl = implementation(src, kappa, lam)
    others = [t for t in (grad_out, other) if t is not None]
    if impl == 'triton' and all(backends.takes_triton(t) for t in others):
        return 'triton'
    if impl == 'op' and (all(t.dtype is _F32 for t in [src, *others]) or
                         src.is_cuda and all(t.dtype == src.dtype
                                             for t in others)):
        return 'op'
    return 'rebuild'


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
        OpRowCache.entries = cpu.operator_entries()
        try:
            return OpRowCache.entries[name](x, kappa, lam, float(lambda_min),
                                            int(channel_dim))
        except RuntimeError as e:  # a GPU the CUDA kernels hold no code for
            if not cuda_build.unserved(e, x.device):
                raise
        # switched off: the table now picks the next row
        return run(name, x, kappa, lam, lambda_min, channel_dim)
    check_params(x, kappa, lam, channel_dim)  # before any expansion
    options = (name, lambda_min, channel_dim)
    if impl == 'composite':
        return composite(x, kappa, lam, *options)
    return run_fused(IMPLEMENTATIONS[impl], name, (x, kappa, lam), options)
