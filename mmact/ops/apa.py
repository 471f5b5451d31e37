"""APA and AGLU (Alexandridis et al. 2025, Eq. 5, 6, 13; docs/design.md §2).

With ``t = l * exp(-k z)`` and ``a = ln(l) - k z`` (so ``t = e^a``)::

    eta(z; k, l)  = (1 + t) ** (-1 / l) = exp(-softplus(a) / l)     APA
    AGLU(z; k, l) = z * eta(z; k, l)

``softplus(a) = log1p(t)`` is the stable form of App. A (written there as
``exp((1/l) * softplus(k z - ln l, beta=-1))``). With ``g = sigmoid(a) =
t / (1 + t)``, so that ``1 / (l + e^{kz}) = g / l``, the derivatives are::

    d eta / dz = eta * k * g / l
    d eta / dk = eta * z * g / l
    d eta / dl = eta * (softplus(a) - g) / l^2
    d AGLU / dz = eta * (1 + k z g / l)
    d AGLU / dk = z^2 * eta * g / l
    d AGLU / dl = z * eta * (softplus(a) - g) / l^2

The ``softplus(a) / l^2`` term of the lambda gradient is the one missing from
the paper's Eq. 8 and from the reference backward.

Both operators are ``torch.autograd.Function`` s that save only the input and
the (tiny) parameters, recompute ``eta`` in backward and reduce the parameter
gradients in the same pass. The lambda clamp and the expansion of a shared
parameter beside a per-channel one happen inside them (their backward applies
the chain rule, :func:`_chain_to_params`), so a call records one autograd
node; a call with nothing to differentiate (``eval`` under ``no_grad``)
records none. Half-precision inputs are evaluated in float32 and
the result is returned in the input's dtype.

:func:`rebuilt_backward` is the same backward at an input that was not kept
but is rebuilt from the tensors it was computed from (a BN affine, an
attention product, a residual add; memory-lean training in
:mod:`mmact.models.backbones.recompute`); the CPU and Triton kernels
rebuild it per element inside their backward pass.

Implementations: :func:`_implementation` picks one per call from the
input alone (the backends in force were decided once,
:mod:`mmact.ops.backends`); its table is the whole dispatch. Each
implementation takes the raw parameters and clamps / expands them itself:

- ``'c'``: eager float32 (or half precision, computed in float32) CPU
  tensors, the fused C kernels of
  :mod:`mmact.ops.apa_cpu_kernel` (one C call forward, one backward);
- ``'triton'``: CUDA float32 / float16 / bfloat16 tensors, the fused
  Triton kernels of :mod:`mmact.ops.apa_triton` (also CPU tensors under
  ``MMACT_TRITON=1`` with ``TRITON_INTERPRET=1``, for tests);
- ``'torch'``: everything else (float64, no C compiler, backends switched
  off): torch ops with in-place temporaries;
- ``'traced'``: ``torch.compile`` / ``torch.jit`` / dispatch modes: the
  torch ops, with the clamp outside the Function (inductor fuses them);
- ``'composite'``: ``torch.onnx.export`` and forward-mode AD
  (``torch.autograd.forward_ad``, ``torch.func.jvp``): a composite of
  standard ops (Softplus, Exp, Log, Mul), which exporters translate and
  which carry tangents. Export with the TorchScript exporter (the keyword
  that selects it on each torch:
  :data:`mmact.versions.TORCHSCRIPT_ONNX_EXPORT`); the dynamo exporter, the
  default in torch 2.14, additionally needs ``onnxscript``.
"""
import numbers
from typing import Callable, Dict, Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor

from ..versions import (forward_ad_active, is_compiling, is_tracing,
                        needs_input_grad)
from . import backends
from .apa_cpu_kernel import get_kernel, get_ops
from .second_derivative import refuse_second_derivative

__all__ = [
    'apa', 'aglu', 'apa_reference', 'aglu_reference', 'clamp_lambda',
    'rebuild_input', 'rebuilt_backward'
]

ParamLike = Union[Tensor, float]


def _check_input(x: Tensor, op: str) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f'{op}: input must be a torch.Tensor, '
                        f'got {type(x).__name__}')
    if not x.is_floating_point():
        raise TypeError(f'{op}: input must be a floating-point tensor '
                        '(float16, bfloat16, float32 or float64), '
                        f'got dtype {x.dtype}')


def _as_param(p: ParamLike, x: Tensor) -> Tensor:
    if isinstance(p, Tensor):
        return p
    return torch.tensor(float(p), dtype=torch.float32, device=x.device)


def _channel_dim(x: Tensor, channel_dim: int) -> int:
    if not -x.dim() <= channel_dim < x.dim():
        raise ValueError(f'channel_dim={channel_dim} is out of range for an '
                         f'input with {x.dim()} dims')
    return channel_dim % x.dim()


def _broadcast_shape(p: Tensor, x: Tensor, channel_dim: int,
                     name: str) -> Tuple[int, ...]:
    """Shape that makes a parameter with 1 or C values broadcast against x."""
    if p.numel() == 1:
        return ()
    dim = _channel_dim(x, channel_dim)
    channels = x.shape[dim]
    if p.numel() != channels:
        raise ValueError(
            f'{name} has {p.numel()} values (num_parameters={p.numel()}) but '
            f'the input has {channels} channels at dim {dim} (shape '
            f'{tuple(x.shape)}); use num_parameters=1 or {channels}, or set '
            'channel_dim to the channel axis')
    shape = [1] * x.dim()
    shape[dim] = channels
    return tuple(shape)


def _reduce_dims(x: Tensor, shape: Tuple[int, ...]) -> Optional[list]:
    """Dims to sum a parameter gradient over; None means "all, to a scalar"."""
    if len(shape) == 0:
        return None
    return [d for d in range(x.dim()) if shape[d] == 1]


def _dot(u: Tensor, v: Tensor, dims: Optional[list]) -> Tensor:
    """sum(u * v) over ``dims`` (all when None); may overwrite ``u``."""
    if dims is None:
        return torch.dot(u.reshape(-1), v.reshape(-1))
    return u.mul_(v).sum(dims, keepdim=True)


def _compute_dtype(x: Tensor) -> torch.dtype:
    """float16 / bfloat16 / float32 -> float32, float64 -> float64 (what
    type promotion with float32 gives, written so that torch 2.1's
    ``torch.compile`` traces it)."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _param_views(x: Tensor, kappa: Tensor, lam: Tensor, channel_dim: int,
                 dtype: torch.dtype) -> Tuple[Tensor, Tensor]:
    """``kappa`` and ``lam`` (detached, in ``dtype``) shaped to broadcast
    against ``x`` (the torch path's form)."""
    k = kappa.detach().to(dtype).reshape(
        _broadcast_shape(kappa, x, channel_dim, 'kappa'))
    l = lam.detach().to(dtype).reshape(  # noqa: E741
        _broadcast_shape(lam, x, channel_dim, 'lambda'))
    return k, l


def _grad_to_param(grad: Optional[Tensor], p: Tensor) -> Optional[Tensor]:
    if grad is None:
        return None
    return grad.reshape(p.shape).to(p.dtype)


def _eta_parts(z: Tensor, k: Tensor, l: Tensor):  # noqa: E741
    """Recompute (softplus(a), sigmoid(a), eta) with a = ln l - k z."""
    a = torch.addcmul(torch.log(l), z, k, value=-1.0)
    sp = F.softplus(a)
    g = a.sigmoid_()
    eta = torch.mul(sp, -1.0 / l).exp_()
    return sp, g, eta


def _composite_eta(z: Tensor, k: Tensor, l: Tensor) -> Tensor:  # noqa: E741
    """Stable eta written with standard differentiable ops (export path)."""
    return torch.exp(-F.softplus(torch.log(l) - k * z) / l)


def clamp_lambda(lambda_: Tensor, lambda_min: float) -> Tensor:
    """``max(lambda_, lambda_min)`` with the gradient passed where
    ``lambda_ > lambda_min`` only, on every torch.

    ``Tensor.clamp`` passes the gradient at ``lambda_ == lambda_min`` on
    torch 2.1 and stops it on newer torch; this strict boundary is the one
    the fused backwards and :func:`rebuilt_backward` use.
    """
    return torch.where(lambda_ > lambda_min, lambda_, lambda_min)


def _expanded(kappa: Tensor, lam: Tensor) -> Tuple[Tensor, Tensor]:
    """A shared parameter beside a per-channel one, expanded to its size
    (autograd, or :func:`_chain_to_params`, sums its gradient)."""
    if kappa.numel() == 1 and lam.numel() > 1:
        kappa = kappa.reshape(1).expand(lam.numel()).contiguous()
    elif lam.numel() == 1 and kappa.numel() > 1:
        lam = lam.reshape(1).expand(kappa.numel()).contiguous()
    return kappa, lam


def _kernel_params(kappa: Tensor, lambda_: Tensor,
                   lambda_min: float) -> Tuple[Tensor, Tensor]:
    """``kappa`` and ``lambda_`` clamped to ``lambda_min``, both shared or
    both per channel (the form the torch and Triton code take)."""
    return _expanded(kappa, clamp_lambda(lambda_, lambda_min))


def _chain_to_params(grad_k: Optional[Tensor], grad_l: Optional[Tensor],
                     kappa: Tensor, lambda_: Tensor, lambda_min: float):
    """Gradients w.r.t. the kernel parameters (:func:`_kernel_params`) to
    those w.r.t. ``kappa`` and ``lambda_``, as autograd does through
    ``_kernel_params``: expanded shared values are summed and the clamp
    passes the gradient only where ``lambda_ > lambda_min``."""
    if grad_k is not None:
        grad_k = grad_k.sum() if kappa.numel() == 1 else grad_k
        grad_k = grad_k.reshape(kappa.shape).to(kappa.dtype)
    if grad_l is not None:
        grad_l = grad_l.sum() if lambda_.numel() == 1 else grad_l
        grad_l = grad_l.reshape(lambda_.shape).to(lambda_.dtype)
        grad_l = torch.where(lambda_.detach() > lambda_min, grad_l, 0)
    return grad_k, grad_l


def _check_params(x: Tensor, kappa: Tensor, lam: Tensor,
                  channel_dim: int) -> None:
    _broadcast_shape(kappa, x, channel_dim, 'kappa')
    _broadcast_shape(lam, x, channel_dim, 'lambda')


def _torch_forward(name: str, x: Tensor, kappa: Tensor, lam: Tensor,
                   channel_dim: int) -> Tensor:
    """Forward with torch ops; ``kappa`` and ``lam`` as
    :func:`_kernel_params` returns them."""
    z = x.to(_compute_dtype(x))
    k, l = _param_views(x, kappa, lam, channel_dim, z.dtype)  # noqa: E741
    a = torch.addcmul(torch.log(l), z, k, value=-1.0)
    out = F.softplus(a).mul_(-1.0 / l).exp_()
    if name == 'aglu':
        out.mul_(z)
    return out if out.dtype == x.dtype else out.to(x.dtype)


def _torch_grads(name: str, x: Tensor, grad_out: Tensor, kappa: Tensor,
                 lam: Tensor, channel_dim: int, needs: Sequence[bool]):
    """(grad_x, grad_kappa, grad_lam) of ``name`` at ``x`` with torch ops;
    ``kappa`` and ``lam`` as :func:`_kernel_params` returns them."""
    need_x, need_k, need_l = needs[:3]
    z = x.to(_compute_dtype(x))
    k, l = _param_views(x, kappa, lam, channel_dim, z.dtype)  # noqa: E741
    inv_l = 1.0 / l
    sp, g, w = _eta_parts(z, k, l)
    w.mul_(grad_out.to(z.dtype))  # w = go * eta
    grad_x = grad_k = grad_l = None
    if name == 'apa':
        if need_l:
            # d eta / dl = eta * (sp - g) / l^2
            q = sp.sub_(g)
            grad_l = _dot(q, w, _reduce_dims(x, l.shape)) * inv_l * inv_l
        p = g.mul_(w)  # go * eta * g
        if need_x:
            # d eta / dz = eta * g * k / l
            grad_x = torch.mul(p, k * inv_l).to(x.dtype)
        if need_k:
            # d eta / dk = eta * g * z / l
            grad_k = _dot(p, z, _reduce_dims(x, k.shape)) * inv_l
    else:
        if need_l:
            # d AGLU / dl = z * eta * (sp - g) / l^2
            q = sp.sub_(g).mul_(z)
            grad_l = _dot(q, w, _reduce_dims(x, l.shape)) * inv_l * inv_l
        p = g.mul_(z).mul_(w)  # go * eta * z * g
        if need_x:
            # d AGLU / dz = eta + eta * z * g * k / l
            grad_x = w.addcmul_(p, k * inv_l).to(x.dtype)
        if need_k:
            # d AGLU / dk = z^2 * eta * g / l
            grad_k = _dot(p, z, _reduce_dims(x, k.shape)) * inv_l
    return grad_x, _grad_to_param(grad_k, kappa), _grad_to_param(grad_l, lam)


class _Clamping:
    """Implementations whose math takes the parameters clamped and both
    shared or both per channel (:func:`_kernel_params`); the chain rule to
    the raw parameters is :func:`_chain_to_params`."""

    @classmethod
    def forward(cls, name, x, kappa, lam, lambda_min, channel_dim):
        _check_params(x, kappa, lam, channel_dim)
        return cls.clamped_forward(name, x,
                                   *_kernel_params(kappa, lam, lambda_min),
                                   channel_dim)

    @classmethod
    def grads(cls, name, x, grad_out, kappa, lam, lambda_min, channel_dim,
              needs):
        k, l = _kernel_params(kappa, lam, lambda_min)  # noqa: E741
        grad_x, grad_k, grad_l = cls.clamped_grads(name, x, grad_out, k, l,
                                                   channel_dim, needs)
        return (grad_x,
                *_chain_to_params(grad_k, grad_l, kappa, lam, lambda_min))


class _Torch(_Clamping):
    """torch ops, any device and dtype."""
    clamped_forward = staticmethod(_torch_forward)
    clamped_grads = staticmethod(_torch_grads)


class _Triton(_Clamping):
    """The fused Triton kernels (:mod:`mmact.ops.apa_triton`, imported on
    first use: it imports triton)."""

    @staticmethod
    def clamped_forward(*args):
        from .apa_triton import eta_forward
        return eta_forward(*args)

    @staticmethod
    def clamped_grads(*args):
        from .apa_triton import eta_backward
        return eta_backward(*args)


class _C:
    """The fused C kernels (:mod:`mmact.ops.apa_cpu_kernel`): CPU tensors
    (half precision evaluated in float32), float32 parameters; one C call
    each way, which clamps lambda and returns the raw parameters' gradients
    itself."""

    @staticmethod
    def forward(name, x, kappa, lam, lambda_min, channel_dim):
        _check_params(x, kappa, lam, channel_dim)
        if kappa.numel() != lam.numel():
            kappa, lam = _expanded(kappa, lam)
        z = x if x.dtype is _F32 else x.float()
        out = get_kernel().forward(name, z, kappa, lam, lambda_min,
                                   channel_dim)
        return out if z is x else out.to(x.dtype)

    @staticmethod
    def grads(name, x, grad_out, kappa, lam, lambda_min, channel_dim, needs):
        k, l = _expanded(kappa, lam)  # noqa: E741
        z = x if x.dtype is _F32 else x.float()
        grad_x, grad_k, grad_l = get_kernel().backward(name, z, grad_out, k, l,
                                                       lambda_min, channel_dim,
                                                       needs[1], needs[2])
        if kappa.numel() != lam.numel():  # sum the expanded one's
            grad_k, grad_l = _chain_to_params(grad_k, grad_l, kappa, lam, 0.0)
        grad_x = (
            grad_x if z is x else grad_x.to(x.dtype)) if needs[0] else None
        return grad_x, grad_k, grad_l


_IMPLEMENTATIONS = {'torch': _Torch, 'triton': _Triton, 'c': _C}
_PLAIN_TYPES = (Tensor, torch.nn.Parameter)
_F32 = torch.float32
_C_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _implementation(x: Tensor, kappa: Tensor, lam: Tensor) -> str:
    """Which implementation evaluates APA / AGLU on ``x``: the one place
    this is decided (the backends in force come from
    :mod:`mmact.ops.backends`, decided once):

    ==========================================  =============
    call                                        runs
    ==========================================  =============
    inside ``torch.onnx.export``                ``composite``
    traced (``torch.compile``, ``torch.jit``,   ``traced``
    fake tensors, dispatch modes)
    a forward-mode AD level is open             ``composite``
    a tensor the Triton settings cover (CUDA    ``triton``
    float32 / float16 / bfloat16; CPU with
    ``triton='all'``)
    plain strided float32 / float16 /           ``op``
    bfloat16 CPU tensor, float32 parameters,
    C kernels on, torch operators built
    the same, operators not built (no C++       ``c``
    compiler or ninja), ctypes library built
    anything else                               ``torch``
    ==========================================  =============

    ``op`` is :func:`~mmact.ops.apa_cpu_kernel.get_ops`' operator, which
    records its own (C++) autograd node; ``c`` calls the same kernels
    through ctypes from :class:`_APAFunction` / :class:`_AGLUFunction`.

    Once a call took ``op``, :func:`apa` / :func:`aglu` hand each call that
    dynamo does not trace to the operator's Python entry first (until the
    settings change): it takes the ``op`` calls (this table's checks, in
    C++) and declines the others with None, which then come here.
    """
    if is_tracing():  # first: tracers reject reading x.layout
        return 'composite' if torch.onnx.is_in_onnx_export() else 'traced'
    if forward_ad_active():  # the kernels' backward carries no tangents
        return 'composite'
    if backends.takes_triton(x):
        return 'triton'
    if (x.is_cpu and x.dtype in _C_DTYPES and kappa.dtype is _F32
            and lam.dtype is _F32 and kappa.is_cpu and lam.is_cpu
            and type(x) in _PLAIN_TYPES and x.layout == torch.strided
            and backends.settings().cpu_kernels):
        if get_ops() is not None:
            return 'op'
        if get_kernel() is not None:
            return 'c'
    return 'torch'


#: The operators' Python entries (``get_ops()``) while the settings in force
#: send ``op`` calls to them: set by the first such call, dropped when
#: :func:`mmact.ops.backends.configure` runs.
_entries: Optional[Dict[str, Callable]] = None


def _drop_entries() -> None:
    global _entries
    _entries = None


backends.on_change(_drop_entries)


def _eta_apply(name: str, ctx, x: Tensor, kappa: Tensor, lam: Tensor,
               lambda_min: Optional[float], channel_dim: int,
               impl: str) -> Tensor:
    ctx.save_for_backward(x, kappa, lam)
    ctx.lambda_min, ctx.channel_dim, ctx.impl = lambda_min, channel_dim, impl
    if lambda_min is None:  # traced: the parameters came clamped
        return _torch_forward(name, x, kappa, lam, channel_dim)
    return _IMPLEMENTATIONS[impl].forward(name, x, kappa, lam, lambda_min,
                                          channel_dim)


def _eta_backward(name: str, ctx, grad_out: Tensor):
    x, kappa, lam = ctx.saved_tensors
    needs = needs_input_grad(ctx, 3)
    if ctx.lambda_min is None:  # traced: the compiler differentiates
        grads = _torch_grads(name, x, grad_out, kappa, lam, ctx.channel_dim,
                             needs)
        return (*grads, None, None, None)
    create_graph = torch.is_grad_enabled()
    with torch.no_grad():
        grads = _IMPLEMENTATIONS[ctx.impl].grads(name, x, grad_out, kappa, lam,
                                                 ctx.lambda_min,
                                                 ctx.channel_dim, needs)
    if create_graph:
        grads = refuse_second_derivative(f'mmact.ops.{name}', grads)
    return (*grads, None, None, None)


class _APAFunction(torch.autograd.Function):
    """eta(z; k, l) with recompute-in-backward (saves only the input and the
    raw parameters; the lambda clamp and the expansion of a shared parameter
    happen inside, so that autograd records one node per call). With
    ``lambda_min=None`` (traced) the parameters come clamped and expanded
    and torch ops run."""

    @staticmethod
    def forward(ctx, x: Tensor, kappa: Tensor, lam: Tensor,
                lambda_min: Optional[float], channel_dim: int,
                impl: str) -> Tensor:
        return _eta_apply('apa', ctx, x, kappa, lam, lambda_min, channel_dim,
                          impl)

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        return _eta_backward('apa', ctx, grad_out)


class _AGLUFunction(torch.autograd.Function):
    """z * eta(z; k, l); as :class:`_APAFunction`."""

    @staticmethod
    def forward(ctx, x: Tensor, kappa: Tensor, lam: Tensor,
                lambda_min: Optional[float], channel_dim: int,
                impl: str) -> Tensor:
        return _eta_apply('aglu', ctx, x, kappa, lam, lambda_min, channel_dim,
                          impl)

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        return _eta_backward('aglu', ctx, grad_out)


def _composite(name: str, x: Tensor, kappa: Tensor, lam: Tensor,
               lambda_min: float, channel_dim: int) -> Tensor:
    """Standard ops only: exporters translate them, forward-mode AD
    differentiates them."""
    kappa, lam = _kernel_params(kappa, lam, lambda_min)
    z = x.to(_compute_dtype(x))
    k = kappa.to(z.dtype).reshape(
        _broadcast_shape(kappa, x, channel_dim, 'kappa'))
    l = lam.to(z.dtype).reshape(  # noqa: E741
        _broadcast_shape(lam, x, channel_dim, 'lambda'))
    eta = _composite_eta(z, k, l)
    return (z * eta if name == 'aglu' else eta).to(x.dtype)


def _run(fn, x: Tensor, kappa: ParamLike, lambda_: ParamLike,
         lambda_min: float, channel_dim: int, op: str) -> Tensor:
    _check_input(x, op)
    if not lambda_min > 0:
        raise ValueError(f'{op}: lambda_min must be > 0, got {lambda_min}')
    if (isinstance(channel_dim, bool)
            or not isinstance(channel_dim, numbers.Integral)):
        raise TypeError(f'{op}: channel_dim must be an int axis, got '
                        f'{channel_dim!r}')
    # (the isinstance checks inline: each call counts on small tensors)
    kappa = kappa if isinstance(kappa, Tensor) else _as_param(kappa, x)
    lam = lambda_ if isinstance(lambda_, Tensor) else _as_param(lambda_, x)
    impl = _implementation(x, kappa, lam)
    if impl == 'op':
        global _entries
        _entries = get_ops()
        return _entries[op](x, kappa, lam, float(lambda_min), int(channel_dim))
    if impl == 'composite':
        return _composite(op, x, kappa, lam, lambda_min, channel_dim)
    if not (torch.is_grad_enabled() and
            (x.requires_grad or kappa.requires_grad or lam.requires_grad)):
        # Nothing to differentiate (eval, no_grad): no autograd node.
        impl = 'torch' if impl == 'traced' else impl
        return _IMPLEMENTATIONS[impl].forward(op, x, kappa, lam, lambda_min,
                                              channel_dim)
    if impl == 'traced':
        # torch 2.1's dynamo cannot trace the clamp inside the Function's
        # backward: clamp as ordinary ops, which autograd differentiates.
        _check_params(x, kappa, lam, channel_dim)
        return fn.apply(x, *_kernel_params(kappa, lam, lambda_min), None,
                        channel_dim, impl)
    return fn.apply(x, kappa, lam, lambda_min, channel_dim, impl)


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
    if _entries is not None and not is_compiling():
        y = _entries['apa'](x, kappa, lambda_, lambda_min, channel_dim)
        if y is not None:
            return y
    return _run(_APAFunction, x, kappa, lambda_, lambda_min, channel_dim,
                'apa')


def aglu(x: Tensor,
         kappa: ParamLike,
         lambda_: ParamLike,
         lambda_min: float = 1e-4,
         channel_dim: int = 1) -> Tensor:
    """Adaptive Generalised Linear Unit ``x * (1 + l e^{-k x})^{-1/l}``.

    ``kappa = lambda_ = 1`` is SiLU, ``lambda_ -> 0`` the Gumbel gate.

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
    if _entries is not None and not is_compiling():
        y = _entries['aglu'](x, kappa, lambda_, lambda_min, channel_dim)
        if y is not None:
            return y
    return _run(_AGLUFunction, x, kappa, lambda_, lambda_min, channel_dim,
                'aglu')


def rebuild_input(src: Tensor,
                  scale: Optional[Tensor] = None,
                  shift: Optional[Tensor] = None,
                  other: Optional[Tensor] = None,
                  other_scale: Optional[Tensor] = None) -> Tensor:
    """``src * scale + shift + other * other_scale``, absent terms left out
    (a missing ``scale`` or ``other_scale`` is 1).

    The form in which :func:`rebuilt_backward` takes an activation input
    that was not kept for backward.

    Args:
        src (Tensor): (N, C, ...) tensor the input was computed from, e.g.
            the input of a BN layer.
        scale (Tensor, optional): Broadcastable factor of ``src``: a BN's
            per-channel scale (1, C, 1, ...) or attention weights
            (N, C, 1, ...).
        shift (Tensor, optional): Broadcastable per-channel shift.
        other (Tensor, optional): Residual term, ``src``'s shape.
        other_scale (Tensor, optional): Broadcastable factor of ``other``
            (a downsample BN's scale).

    Returns:
        Tensor: The rebuilt input.
    """
    if scale is None:
        z = src if shift is None else src + shift
    else:
        z = src * scale if shift is None else torch.addcmul(shift, src, scale)
    if other is not None:
        z = z + other if other_scale is None else torch.addcmul(
            z, other, other_scale)
    return z


def _rows_or_channels(t: Optional[Tensor], x: Tensor, rows: bool) -> bool:
    """Whether ``t`` is None or shaped (1, C, 1, ...) or, with ``rows``,
    (N, C, 1, ...) against ``x`` (N, C, ...)."""
    if t is None:
        return True
    return (t.dim() == x.dim() and t.shape[1] == x.shape[1]
            and all(s == 1 for s in t.shape[2:])
            and (t.shape[0] == 1 or rows and t.shape[0] == x.shape[0]))


def _kernel_rebuildable(grad_out: Tensor, src: Tensor, scale: Optional[Tensor],
                        shift: Optional[Tensor], other: Optional[Tensor],
                        other_scale: Optional[Tensor], per_channel: bool,
                        channel_dim: int) -> bool:
    """Whether a fused kernel can rebuild the input itself: (N, C, ...)
    tensors of one shape, per-channel (or, for ``scale``, per-(n, c))
    coefficients, parameters shared or along dim 1."""
    if src.dim() < 2 or per_channel and channel_dim % src.dim() != 1:
        return False
    if any(t is not None and t.shape != src.shape for t in (grad_out, other)):
        return False
    coefs = ((scale, True), (shift, False), (other_scale, False))
    return all(_rows_or_channels(t, src, rows) for t, rows in coefs)


def _fused_rebuilt_grads(name: str, grad_out: Tensor, kappa: Tensor,
                         lam: Tensor, lambda_min: float, channel_dim: int,
                         needs: Sequence[bool], src: Tensor,
                         scale: Optional[Tensor], shift: Optional[Tensor],
                         other: Optional[Tensor],
                         other_scale: Optional[Tensor]):
    """``(grad_z, grad_kappa, grad_lambda)`` (raw parameters) from a fused
    kernel that rebuilds the input itself (Triton on the Triton path, C for
    float32 CPU tensors), or None where none applies."""
    if not _kernel_rebuildable(grad_out, src, scale, shift, other, other_scale,
                               max(kappa.numel(), lam.numel()) > 1,
                               channel_dim):
        return None
    impl = _implementation(src, kappa, lam)
    if impl == 'triton' and all(
            t is None or backends.takes_triton(t) for t in (grad_out, other)):
        from .apa_triton import eta_backward_rebuilt  # imports triton
        k, l = _kernel_params(kappa, lam, lambda_min)  # noqa: E741
        grads = eta_backward_rebuilt(name, grad_out, k, l, src, scale, shift,
                                     other, other_scale, needs)
        if grads is None:  # a layout the kernel cannot index
            return None
        return (grads[0],
                *_chain_to_params(*grads[1:], kappa, lam, lambda_min))
    # the rebuilding C kernel (through ctypes, also where the operators of
    # ``op`` serve the per-call path) reads float32 sources as they are
    if impl not in ('op', 'c') or any(
            t is not None and t.dtype is not _F32
            for t in (src, grad_out, other)) or get_kernel() is None:
        return None
    k, l = _expanded(kappa, lam)  # noqa: E741
    grad_z, grad_k, grad_l = get_kernel().backward_rebuilt(
        name, grad_out, k, l, lambda_min, src, scale, shift, other,
        other_scale, needs[1], needs[2])
    if kappa.numel() != lam.numel():  # sum the expanded one's
        grad_k, grad_l = _chain_to_params(grad_k, grad_l, kappa, lam, 0.0)
    return grad_z, grad_k, grad_l


def rebuilt_backward(
    name: str,
    grad_out: Tensor,
    kappa: Tensor,
    lambda_: Tensor,
    lambda_min: float,
    channel_dim: int,
    src: Tensor,
    scale: Optional[Tensor] = None,
    shift: Optional[Tensor] = None,
    other: Optional[Tensor] = None,
    other_scale: Optional[Tensor] = None
) -> Tuple[Tensor, Optional[Tensor], Optional[Tensor]]:
    """Backward of :func:`apa` / :func:`aglu` at an input that was not kept.

    The input is ``z = rebuild_input(src, scale, shift, other,
    other_scale)``: a BN affine of ``src`` (``scale`` and ``shift`` of
    shape (1, C, 1, ...)), or attention weights ``scale`` of shape
    (N, C, 1, ...), plus optionally a residual ``other`` (itself maybe a BN
    affine: ``other_scale``; its shift goes into ``shift``). The float32
    CPU kernel and, on the Triton path (CUDA), the Triton backward kernel
    compute ``z`` per element as they read the sources, so neither ``z``
    nor an autograd graph of the activation is built; in other cases
    (float64, small CPU tensors, no compiler, other shapes; on the Triton
    path a per-sample ``scale`` on a map whose samples are not outermost in
    memory, or with one channel) ``z`` is rebuilt with torch and the
    operator's own backward runs on it.

    Args:
        name (str): ``'apa'`` or ``'aglu'``.
        grad_out (Tensor): Gradient of the activation's output.
        kappa, lambda_ (Tensor): The parameters as given to :func:`apa` /
            :func:`aglu` (before the clamp); gradients are returned for
            those that require grad.
        lambda_min (float): Lower clamp of ``lambda_``.
        channel_dim (int): Channel axis of per-channel parameters.
        src, scale, shift, other, other_scale: See above.

    Returns:
        tuple: ``(grad_z, grad_kappa, grad_lambda)``; parameter gradients
        shaped and typed as the parameters, None where not required.
    """
    if name not in ('apa', 'aglu'):
        raise ValueError(f"name must be 'apa' or 'aglu', got {name!r}")
    kappa_grad, lambda_grad = kappa.requires_grad, lambda_.requires_grad
    kappa, lambda_ = kappa.detach(), lambda_.detach()
    needs = (True, kappa_grad, lambda_grad)
    grads = _fused_rebuilt_grads(name, grad_out, kappa, lambda_, lambda_min,
                                 channel_dim, needs, src, scale, shift, other,
                                 other_scale)
    if grads is None:
        z = rebuild_input(src, scale, shift, other, other_scale)
        impl = _implementation(z, kappa, lambda_)
        impl = impl if impl in _IMPLEMENTATIONS else 'torch'
        grads = _IMPLEMENTATIONS[impl].grads(name, z, grad_out, kappa, lambda_,
                                             lambda_min, channel_dim, needs)
    return grads


def apa_reference(x: Tensor, kappa: Tensor, lambda_: Tensor) -> Tensor:
    """APA written directly from the paper formula (Eq. 5), plain autograd.

    For tests and benchmarks only: not stable and saves many tensors.

    Args:
        x (Tensor): Input.
        kappa (Tensor): Broadcastable slope.
        lambda_ (Tensor): Broadcastable shape parameter (> 0).
    """
    return (lambda_ * torch.exp(-kappa * x) + 1)**(-1 / lambda_)


def aglu_reference(x: Tensor, kappa: Tensor, lambda_: Tensor) -> Tensor:
    """AGLU written directly from the paper formula (Eq. 6), plain autograd.

    For tests and benchmarks only: not stable and saves many tensors.

    Args:
        x (Tensor): Input.
        kappa (Tensor): Broadcastable slope.
        lambda_ (Tensor): Broadcastable shape parameter (> 0).
    """
    return x * apa_reference(x, kappa, lambda_)
