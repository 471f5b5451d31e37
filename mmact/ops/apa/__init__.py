"""APA and AGLU (Alexandridis et al. 2025, Eq. 5, 6, 13; math in
docs/design/operators.md).

::

    APA:  eta(z; k, l) = (1 + l e^{-k z}) ** (-1 / l)
    AGLU: z * eta(z; k, l)          (k = l = 1: SiLU; l -> 0: Gumbel gate)

The package, one idea per module:

- :mod:`.formula`: the stable form and its derivatives in torch ops,
  written once (the export / compile composite, the fallback forward and
  backward use them), and the paper's formulas as written (test oracle);
- :mod:`.params`: the lambda clamp, a shared value beside a per-channel
  one, and the chain rule back to the raw parameters;
- :mod:`.dispatch`: which implementation runs (one table, with the
  ``op`` row's cache and the rows of the rebuilt backward), the call (the
  ``autograd.Function`` is :class:`mmact.ops.table.FusedFunction`);
- :mod:`.cpu`: the fused C kernels, through mmact's CPU extension;
- :mod:`.triton`, :mod:`.triton_kernels`: the fused Triton kernels;
- :mod:`.rebuilt`: the backward at an input rebuilt from its sources.

Every implementation saves only the input and the (tiny) parameters,
recomputes ``eta`` in backward and reduces the parameter gradients in the
same pass; a call records one autograd node (none where no gradient is
wanted). Half-precision inputs are evaluated in float32 and the result is
returned in the input's dtype.
"""
from torch import Tensor

from ...compat import is_compiling
from .. import cuda_build
from .dispatch import OpRowCache, run
from .formula import aglu_reference, apa_reference
from .params import ParamLike, clamp_lambda
from .rebuilt import rebuild_input, rebuilt_backward

__all__ = [
    'apa', 'aglu', 'apa_reference', 'aglu_reference', 'clamp_lambda',
    'rebuild_input', 'rebuilt_backward'
]


def apa(x: Tensor,
        kappa: ParamLike,
        lambda_: ParamLike,
        lambda_min: float = 1e-4,
        channel_dim: int = 1) -> Tensor:
    """Adaptive Parametric Activation ``(1 + l e^{-k x})^{-1/l}``.

    Args:
        x (Tensor): Floating-point input of any shape.
        kappa (Tensor | float): Slope ``k``; one value or one per channel.
        lambda_ (Tensor | float): Shape ``l``; one value or one per channel.
            It is clamped to ``lambda_min`` from below.
        lambda_min (float): Lower clamp of ``lambda_``; must be > 0.
            Defaults to 1e-4.
        channel_dim (int): Axis of ``x`` that per-channel parameters follow
            (1 for NCHW, -1 for NLC). Defaults to 1.

    Returns:
        Tensor: ``eta(x)`` with the dtype and shape of ``x``.
    """
    entries = OpRowCache.entries  # inline: every call pays this
    if entries is not None and not is_compiling():
        try:
            y = entries['apa'](x, kappa, lambda_, lambda_min, channel_dim)
        except RuntimeError as e:  # a GPU the CUDA kernels hold no code for
            if not cuda_build.unserved(e, x.device):
                raise
            y = None  # switched off: run() takes the Triton row
        if y is not None:  # None where the C++ entry declines the call
            return y
    return run('apa', x, kappa, lambda_, lambda_min, channel_dim)


def aglu(x: Tensor,
         kappa: ParamLike,
         lambda_: ParamLike,
         lambda_min: float = 1e-4,
         channel_dim: int = 1) -> Tensor:
    """Adaptive Generalised Linear Unit ``x * (1 + l e^{-k x})^{-1/l}``.

    Args:
        x (Tensor): Floating-point input of any shape.
        kappa (Tensor | float): Slope ``k``; one value or one per channel.
        lambda_ (Tensor | float): Shape ``l``; one value or one per channel.
            It is clamped to ``lambda_min`` from below.
        lambda_min (float): Lower clamp of ``lambda_``; must be > 0.
            Defaults to 1e-4.
        channel_dim (int): Axis of ``x`` that per-channel parameters follow
            (1 for NCHW, -1 for NLC). Defaults to 1.

    Returns:
        Tensor: ``x * eta(x)`` with the dtype and shape of ``x``.
    """
    entries = OpRowCache.entries
    if entries is not None and not is_compiling():
        try:
            y = entries['aglu'](x, kappa, lambda_, lambda_min, channel_dim)
        except RuntimeError as e:  # a GPU the CUDA kernels hold no code for
            if not cuda_build.unserved(e, x.device):
                raise
            y = None  # switched off: run() takes the Triton row
        if y is not None:
            return y
    return run('aglu', x, kappa, lambda_, lambda_min, channel_dim)
