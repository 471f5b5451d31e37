"""Which implementation evaluates FleS: one table (:func:`implementation`)
and the cache of its ``operator`` row (:class:`OperatorWindows`).

The backends in force were decided once (:mod:`mmact.ops.backends`); the
composite row is every operator's first (:func:`mmact.ops.table.
wants_composite`).
"""
from typing import Callable, Dict, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor

from .. import backends, cuda_build
from ..table import wants_composite
from . import cpu
from .geometry import WindowGeometry
from .scales import K_HO_MIN, ScaleFn, fles_mlp_scales, fles_shared_mlp_scales

__all__ = ['Plan', 'implementation', 'OperatorWindows']


class Plan(NamedTuple):
    """How :func:`~mmact.ops.fles.fles_fused` runs on one input.

    Args:
        name (str): The row: ``'composite'``, ``'triton'``, ``'operator'``,
            ``'passes'`` or ``'torch'``.
        c_stats (bool): Indicator statistics and their backward in C.
        c_gate (bool): Gate application and its backward in C.
        operator (Callable, optional): The whole op's C++ entry (row
            ``operator``), else None.
    """
    name: str
    c_stats: bool = False
    c_gate: bool = False
    operator: Optional[Callable] = None


_COMPOSITE = Plan('composite')
_TORCH = Plan('torch')
_TRITON = Plan('triton')
_PLAIN_TYPES = (Tensor, torch.nn.Parameter)
#: The scale functions the C++ operator evaluates (its MLP layouts).
_OPERATOR_SCALES = (fles_mlp_scales, fles_shared_mlp_scales)


def implementation(x: Tensor, geom: WindowGeometry, gate: str, mode: str,
                   scale_fn: ScaleFn, params: Sequence[Tensor]) -> Plan:
    """Which implementation runs FleS on ``x``: the one place this is
    decided.

    ==========================================  ==========================
    call                                        runs
    ==========================================  ==========================
    traced (``torch.compile``, ``torch.jit``,   ``composite``: standard ops
    ONNX export, fake tensors, dispatch         (:func:`~mmact.ops.fles.
    modes), forward-mode AD, or                 fles_reference`)
    ``composite=True``
    plain float32 / float16 / bfloat16 NCHW     ``operator``: the whole op
    or channels-last CUDA map, tiles or a       as ``torch.ops.mmact.fles``,
    global window, a gate and indicator the     its CUDA kernels
    kernels have, an MLP layout of              (``csrc/fles_cuda.cu``) and
    :mod:`.scales` with float32 weights on its  the MLP as ATen calls
    device, ``MMACT_CUDA_KERNELS=1`` and the
    CUDA kernels built
    a tensor the Triton settings cover, tiles   ``triton``: the whole op
    or a global window, a gate and indicator    (:mod:`.triton_path`)
    the kernels have
    plain contiguous float32 CPU tensor, tiles  ``operator``: the whole op
    or a global window, C kernels on and        as ``torch.ops.mmact.fles``
    built, a gate and indicator the kernels     (``csrc/fles_op.cpp``)
    have, an MLP layout of :mod:`.scales`
    with plain float32 CPU weights of at most
    :data:`~.cpu.LOOP_MACS` multiply-adds
    the same but another indicator, scale       ``passes``: the pixel
    function or a larger MLP                    passes whose gate /
                                                indicator the C kernels
                                                have, the rest in torch
    anything else                               ``torch``
    ==========================================  ==========================

    Where no gradient is wanted no node is recorded (the operator skips
    it; the other fused rows run their forward without the ``Function``).
    A CUDA call the CUDA kernels do not take (:func:`.cpu.cuda_declines`)
    runs the next row with one warning saying why.

    The operator's Python entry takes the ``operator`` calls (these checks
    in C++) and declines the others with None: :class:`OperatorWindows`
    remembers, per caller and input shape, the calls that took it.

    Args:
        x (Tensor): The contiguous ``(N, C, H, W)`` map.
        geom (WindowGeometry): Its window grid.
        gate (str): The gate.
        mode (str): The indicator.
        scale_fn (ScaleFn): Maps indicators to ``(k_ve, k_ho)``.
        params (Sequence[Tensor]): Its parameters.

    Returns:
        Plan: The row, and what it runs in C.
    """
    if wants_composite():  # first: tracers reject reading x.layout
        return _COMPOSITE
    if x.is_cuda and backends.settings().cuda_kernels:
        reason = cpu.cuda_declines(x, geom, gate, mode, scale_fn
                                   in _OPERATOR_SCALES, params)
        if reason is None and cpu.cuda_routed():
            return Plan('operator', operator=cpu.cuda_entry())
        plan = _kernel_rows(x, geom, gate, mode, scale_fn, params)
        if reason is not None:
            cpu.warn_declined(reason, plan.name)
        return plan
    return _kernel_rows(x, geom, gate, mode, scale_fn, params)


def _kernel_rows(x: Tensor, geom: WindowGeometry, gate: str, mode: str,
                 scale_fn: ScaleFn, params: Sequence[Tensor]) -> Plan:
    """:func:`implementation`'s rows after the composite and the CUDA
    operator."""
    if backends.takes_triton(x):
        from . import triton_path  # imports triton
        return _TRITON if triton_path.supported(geom, gate, mode) else _TORCH
    if (x.is_cpu and x.dtype is torch.float32 and type(x) in _PLAIN_TYPES
            and x.layout == torch.strided and x.is_contiguous()
            and not geom.overlapping and backends.settings().cpu_kernels):
        entry = cpu.operator_entry()
        if entry is None:
            return _TORCH
        plan = Plan('passes', mode in cpu.KERNEL_MODES, gate
                    in cpu.KERNEL_GATES)
        if (plan.c_stats and plan.c_gate and scale_fn in _OPERATOR_SCALES
                and cpu.loop_sized(x, geom, params[0].shape[-2]) and all(
                    p.dtype is torch.float32 and p.is_cpu
                    and type(p) in _PLAIN_TYPES for p in params)):
            return Plan('operator', operator=entry)
        return plan
    return _TORCH


class OperatorWindows:
    """The cache of :func:`implementation`'s ``operator`` row for one caller
    (a FleS layer): per input shape, the window of the calls that took the
    row, so that the next call of that shape goes to the operator's entry
    directly (the layout, geometry, dtype and autocast handling of
    ``FleS.forward``, about 15 us of Python, run once per shape). The entry
    declines with None what the row would not take; a
    :func:`mmact.ops.backends.configure` drops the entry, and the caller
    :meth:`clear` s the windows when its configuration changes.

    Args:
        size (int): The most shapes remembered (multi-scale training sees
            many). Defaults to 32.
    """

    #: The operator's entry while the settings in force send calls to it.
    entry: Optional[Callable] = None

    def __init__(self, size: int = 32) -> None:
        self.size = size
        self.windows: Dict[torch.Size, Tuple[int, int]] = {}

    @classmethod
    def drop(cls) -> None:
        cls.entry = None

    def __call__(self, x: Tensor, params: Sequence[Optional[Tensor]],
                 gate: str, mode: str) -> Optional[Tensor]:
        """The operator on ``x`` if its shape took the row before, else
        (or where the entry declines) None.

        Args:
            x (Tensor): The layer's input.
            params (Sequence[Tensor]): The MLP's four weights.
            gate (str): The gate.
            mode (str): The indicator.
        """
        window = self.windows.get(x.shape)
        entry = OperatorWindows.entry
        if window is None or entry is None:
            return None
        try:
            return entry(x, *params, *window, gate, mode, K_HO_MIN)
        except RuntimeError as e:  # a GPU the CUDA kernels hold no code for
            if not cuda_build.unserved(e, x.device):
                raise
            return None  # switched off: the caller runs the table

    def remember(self, x: Tensor, geom: WindowGeometry, gate: str, mode: str,
                 scale_fn: ScaleFn, params: Sequence[Tensor]) -> None:
        """Remember the window of ``x``'s shape if the table sends ``x`` to
        the operator (arguments as :func:`implementation`; ``x`` is the
        caller's own input).
        """
        if len(self.windows) < self.size:
            plan = implementation(x, geom, gate, mode, scale_fn, params)
            if plan.name == 'operator':
                OperatorWindows.entry = plan.operator
                self.windows[x.shape] = geom.window

    def clear(self) -> None:
        """Forget every shape."""
        self.windows.clear()


backends.on_change(OperatorWindows.drop)
