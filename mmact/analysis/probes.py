"""Find learned activations in a model and read what they learned.

Static views (no data): the learned parameters of each layer and its
pointwise curve, including ``E[y]`` under ``N(0, 1)`` input
(Alexandridis et al. 2025, Fig. 7, 8). Data-dependent views record forward
passes with hooks:
:class:`AttentionRecorder` (channel-attention weights, Sec. III-B) and
:class:`FleSRecorder` (FleS scales and gate saturation, FleS App. E.1/E.3).
Both hooks are removed on exit, so the model is unchanged afterwards.
"""
import math
from collections import defaultdict
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn as nn
from torch import Tensor

from mmact.models.activations import FleS
from mmact.models.activations.base import LearnableActivation

__all__ = [
    'find_modules', 'activation_parameters', 'activation_curve',
    'expected_output', 'AttentionRecorder', 'FleSRecorder'
]


def find_modules(model: nn.Module,
                 types: Sequence[type] = (LearnableActivation, ),
                 pointwise: Optional[bool] = None
                 ) -> List[Tuple[str, nn.Module]]:
    """``(name, module)`` of every module of the given types, in the order
    they were registered (depth order for ResNets, whose blocks register
    their activations in execution order).

    Args:
        model (nn.Module): The model to search.
        types (Sequence[type]): Module classes to find. Defaults to every
            learnable activation.
        pointwise (bool, optional): Keep only learnable activations whose
            ``pointwise`` flag has this value. Defaults to None (all).
    """
    found = [(name, m) for name, m in model.named_modules()
             if isinstance(m, tuple(types))]
    if pointwise is None:
        return found
    return [(name, m) for name, m in found
            if getattr(m, 'pointwise', None) is pointwise]


def _check_learnable(module: nn.Module, caller: str) -> None:
    if not isinstance(module, LearnableActivation):
        raise TypeError(f'{caller}: {type(module).__name__} is not a '
                        'learnable activation (mmact.models.activations.'
                        'base.LearnableActivation)')


def activation_parameters(module: nn.Module) -> Dict[str, np.ndarray]:
    """The learned values of an activation as the forward uses them: its
    ``activation_stats()``, e.g. APA / AGLU ``kappa`` and ``lambda`` (after
    the ``lambda_min`` clamp), AReLU ``alpha`` (clamped) and ``beta``, a
    learnable IGLU ``sigma``; none for FleS, whose scales depend on the
    input (see :class:`FleSRecorder`).

    Args:
        module (nn.Module): A learnable activation.

    Returns:
        dict[str, np.ndarray]: Name -> float64 values, flattened.
    """
    _check_learnable(module, 'activation_parameters')
    return {
        key: t.detach().double().cpu().reshape(-1).numpy()
        for key, t in module.activation_stats().items()
    }


def _num_curves(module: nn.Module) -> int:
    return getattr(module, 'num_parameters', 1)


@torch.no_grad()
def activation_curve(module: nn.Module, z: Tensor) -> Tensor:
    """Evaluate a pointwise activation on the points ``z``.

    Args:
        module (nn.Module): A learnable activation with ``pointwise=True``.
        z (Tensor): 1-D points.

    Returns:
        Tensor: ``(P, len(z))``: one curve per parameter set (P =
        ``num_parameters`` for per-channel activations, else 1).
    """
    _check_learnable(module, 'activation_curve')
    if not module.pointwise:
        raise TypeError(
            f'activation_curve: {type(module).__name__} is not pointwise '
            '(its output depends on more than each element)')
    if z.dim() != 1:
        raise ValueError(f'activation_curve: z must be 1-D, got shape '
                         f'{tuple(z.shape)}')
    param = next(module.parameters(), None)
    z = z.to(param if param is not None else z)
    curves = _num_curves(module)
    if curves == 1:
        return module(z[None])
    if module.channel_dim % 3 == 1:  # (1, C, G): channels first
        return module(z.expand(1, curves, -1))[0]
    return module(z[:, None].expand(1, -1, curves))[0].t()


#: Trapezoid grid for E[y]: [-8, 8] holds all but 1e-15 of N(0, 1), and a
#: 4e-3 step keeps the error at kinks (ReLU-like curves) below 1e-5.
_NORMAL_GRID = (-8.0, 8.0, 4001)


def expected_output(module: nn.Module) -> np.ndarray:
    """``E[f(X)]`` for ``X ~ N(0, 1)`` (Alexandridis et al. 2025, Fig. 7), per
    curve.

    Larger values mean a harder (more ReLU-like) activation; SiLU gives
    about 0.2066, ReLU ``1 / sqrt(2 pi) = 0.3989``.

    Args:
        module (nn.Module): A learnable activation with ``pointwise=True``.

    Returns:
        np.ndarray: ``(P,)`` expectations, float64.
    """
    z = torch.linspace(*_NORMAL_GRID, dtype=torch.float64)
    density = torch.exp(-0.5 * z**2) / math.sqrt(2 * math.pi)
    step = float(z[1] - z[0])
    weights = density * step
    weights[[0, -1]] *= 0.5
    y = activation_curve(module, z).double().cpu()
    return (y * weights).sum(dim=-1).numpy()


class _HookRecorder:
    """Context manager that installs hooks on entry and removes them."""

    def __init__(self) -> None:
        self._handles: list = []

    def _install(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        self._install()
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()


def _attention_sources(model: nn.Module) -> List[Tuple[str, nn.Module]]:
    """Modules whose output is a layer's channel-attention weights.

    Layers naming the submodule in an ``attention_source`` attribute (mmact's
    ``APASELayer`` / ``SEAttention``: their ``gate``); mmpretrain's and
    mmdet's ``SELayer`` (1x1-conv SE): their ``conv2`` ConvModule, which ends
    with the sigmoid.
    """
    sources = []
    for name, module in model.named_modules():
        source = getattr(type(module), 'attention_source', None)
        if isinstance(source, str):
            sources.append((name, module.get_submodule(source)))
        elif type(module).__name__ == 'SELayer' and hasattr(module, 'conv2'):
            sources.append((name, module.conv2))
    return sources


class AttentionRecorder(_HookRecorder):
    """Record channel-attention weights ``A(X)`` of every attention layer.

    Example:
        >>> with AttentionRecorder(model) as rec:
        ...     model(batch)
        >>> rec.weights()['backbone.layer4.2.attention']  # (N, C)

    Args:
        model (nn.Module): A model with SE / APA-SE layers.

    Raises:
        ValueError: if the model has no channel-attention layer.
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.sources = _attention_sources(model)
        if not self.sources:
            raise ValueError(
                'AttentionRecorder: the model has no channel-attention layer '
                '(mmact APASELayer / SEAttention, or an mmpretrain / mmdet '
                'SELayer)')
        self._records: Dict[str, List[np.ndarray]] = defaultdict(list)

    def _install(self) -> None:
        for name, source in self.sources:

            def hook(_module, _inputs, output, name=name):
                weights = output.detach().float().reshape(output.shape[0], -1)
                self._records[name].append(weights.cpu().numpy())

            self._handles.append(source.register_forward_hook(hook))

    def weights(self) -> Dict[str, np.ndarray]:
        """Layer name -> ``(N, C)`` weights of all recorded samples, in
        depth order."""
        return {
            name: np.concatenate(self._records[name])
            for name, _ in self.sources if self._records[name]
        }

    def clear(self) -> None:
        """Forget what was recorded."""
        self._records.clear()


class FleSRecorder(_HookRecorder):
    """Record the scales every FleS layer applies (FleS App. E.1, E.3).

    For each layer and each recorded forward pass it keeps the means of
    ``k_ve`` and ``k_ho``, the mean of the top 10% of ``k_ve`` (App. E.3),
    the fraction of gate values ``rho(k_ho x) > 0.9`` (App. E.1), and a
    random subsample of ``k_ve`` / ``k_ho`` values for histograms.

    Args:
        model (nn.Module): A model with FleS layers.
        max_values (int): Values kept per layer, per scale and per pass for
            the histograms; 0 keeps none. Defaults to 20000.
        seed (int): Seed of the subsampling.

    Raises:
        ValueError: if the model has no FleS layer.
    """

    def __init__(self,
                 model: nn.Module,
                 max_values: int = 20000,
                 seed: int = 0) -> None:
        super().__init__()
        self.layers = find_modules(model, (FleS, ))
        if not self.layers:
            raise ValueError('FleSRecorder: the model has no FleS layer')
        self.max_values = max_values
        self._generator = torch.Generator().manual_seed(seed)
        self._sums: Dict[str, Dict[str, float]] = {}
        self._values: Dict[str, Dict[str, List[Tensor]]] = {}

    def _install(self) -> None:
        for name, module in self.layers:

            def hook(module, inputs, name=name):
                self._record(name, *module.scales(inputs[0]))

            self._handles.append(module.register_forward_pre_hook(hook))

    def _record(self, name: str, k_ve: Tensor, k_ho: Tensor,
                rho: Tensor) -> None:
        sums = self._sums.setdefault(name, defaultdict(float))
        sums['passes'] += 1
        for key, value in FleS.scale_stats(k_ve, k_ho, rho).items():
            sums[key] += value
        if not self.max_values:
            return
        values = self._values.setdefault(name, defaultdict(list))
        for key, t in (('k_ve', k_ve.reshape(-1)), ('k_ho',
                                                    k_ho.reshape(-1))):
            if t.numel() > self.max_values:
                index = torch.randperm(
                    t.numel(), generator=self._generator)[:self.max_values]
                t = t[index.to(t.device)]
            values[key].append(t.cpu())

    def summary(self) -> Dict[str, Dict[str, float]]:
        """Layer name -> means over the recorded passes of ``k_ve_mean``,
        ``k_ho_mean``, ``k_ve_top10_mean`` and ``saturation``."""
        out = {}
        for name, _ in self.layers:
            sums = self._sums.get(name)
            if sums:
                passes = sums['passes']
                out[name] = {
                    key: value / passes
                    for key, value in sums.items() if key != 'passes'
                }
        return out

    def values(self, key: str) -> Dict[str, np.ndarray]:
        """Layer name -> recorded values of ``'k_ve'`` or ``'k_ho'`` (a
        uniform subsample of at most ``max_values`` per pass)."""
        if key not in ('k_ve', 'k_ho'):
            raise ValueError(f"key must be 'k_ve' or 'k_ho', got {key!r}")
        return {
            name: torch.cat(self._values[name][key]).numpy()
            for name, _ in self.layers if name in self._values
        }
