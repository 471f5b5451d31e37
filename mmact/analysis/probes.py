"""Find learned activations in a model and read what they learned.

Static views (no data): the learned parameters of each layer and its
pointwise curve, including ``E[y]`` under ``N(0, 1)`` input (paper 000,
Fig. 7, 8). Data-dependent views record forward passes with hooks:
:class:`AttentionRecorder` (channel-attention weights, Sec. III-B) and
:class:`FleSRecorder` (FleS scales and gate saturation, FleS App. E.1/E.3).
Both hooks are removed on exit, so the model is unchanged afterwards.
"""
import math
from collections import defaultdict
from typing import Dict, List, Sequence, Tuple

import numpy as np
import torch
import torch.nn as nn
from torch import Tensor

from mmact.models.activations import AGLU, APA, IGLU, AReLU, FleS, IGLUApprox
from mmact.models.layers import APASELayer

__all__ = [
    'POINTWISE_ACTIVATIONS', 'LEARNED_ACTIVATIONS', 'find_modules',
    'activation_parameters', 'activation_curve', 'expected_output',
    'AttentionRecorder', 'FleSRecorder', 'SATURATION_THRESHOLD'
]

#: Activations that act elementwise (a curve per parameter set).
POINTWISE_ACTIVATIONS = (APA, AGLU, AReLU, IGLU, IGLUApprox)
#: Every activation type the analysis tools report.
LEARNED_ACTIVATIONS = POINTWISE_ACTIVATIONS + (FleS, )
#: FleS App. E.1: a gate value above this is in the saturation regime.
SATURATION_THRESHOLD = 0.9


def find_modules(model: nn.Module,
                 types: Sequence[type] = LEARNED_ACTIVATIONS
                 ) -> List[Tuple[str, nn.Module]]:
    """``(name, module)`` of every module of the given types, in the order
    they were registered (depth order for ResNets, whose blocks register
    their activations in execution order).

    Args:
        model (nn.Module): The model to search.
        types (Sequence[type]): Module classes to find.
    """
    return [(name, m) for name, m in model.named_modules()
            if isinstance(m, tuple(types))]


def activation_parameters(module: nn.Module) -> Dict[str, np.ndarray]:
    """The learned parameters of an activation, as the forward uses them.

    * APA / AGLU: ``kappa`` and ``lambda`` (lambda after its ``lambda_min``
      clamp), one entry or one per channel.
    * AReLU: ``alpha`` (after its clamp to [0.01, 0.99]) and ``beta``.
    * IGLU / IGLU-APPROX: ``sigma``.
    * FleS: none (its scales depend on the input; see
      :class:`FleSRecorder`).

    Args:
        module (nn.Module): One of :data:`LEARNED_ACTIVATIONS`.

    Returns:
        dict[str, np.ndarray]: Name -> float64 values.
    """

    def values(t: Tensor) -> np.ndarray:
        return t.detach().double().cpu().reshape(-1).numpy()

    if isinstance(module, (APA, AGLU)):
        return dict(
            kappa=values(module.kappa_param),
            **{'lambda': values(module.lambda_param.clamp(
                min=module.lambda_min))})
    if isinstance(module, AReLU):
        return dict(alpha=values(module.alpha.clamp(0.01, 0.99)),
                    beta=values(module.beta))
    if isinstance(module, (IGLU, IGLUApprox)):
        return dict(sigma=values(module.sigma))
    if isinstance(module, FleS):
        return {}
    raise TypeError(f'activation_parameters: {type(module).__name__} is not '
                    'one of ' + ', '.join(t.__name__
                                          for t in LEARNED_ACTIVATIONS))


def _num_curves(module: nn.Module) -> int:
    return getattr(module, 'num_parameters', 1)


@torch.no_grad()
def activation_curve(module: nn.Module, z: Tensor) -> Tensor:
    """Evaluate a pointwise activation on the points ``z``.

    Args:
        module (nn.Module): One of :data:`POINTWISE_ACTIVATIONS`.
        z (Tensor): 1-D points.

    Returns:
        Tensor: ``(P, len(z))``: one curve per parameter set (P = C for
        per-channel APA / AGLU, else 1).
    """
    if not isinstance(module, POINTWISE_ACTIVATIONS):
        raise TypeError(
            f'activation_curve: {type(module).__name__} is not pointwise; '
            'expected one of ' + ', '.join(t.__name__
                                          for t in POINTWISE_ACTIVATIONS))
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
    """``E[f(X)]`` for ``X ~ N(0, 1)`` (paper 000, Fig. 7), per curve.

    Larger values mean a harder (more ReLU-like) activation; SiLU gives
    about 0.2066, ReLU ``1 / sqrt(2 pi) = 0.3989``.

    Args:
        module (nn.Module): One of :data:`POINTWISE_ACTIVATIONS`.

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

    mmact's :class:`APASELayer` / ``SEAttention``: their ``gate``.
    mmpretrain's and mmdet's ``SELayer`` (1x1-conv SE): their ``conv2``
    ConvModule, which ends with the sigmoid.
    """
    sources = []
    for name, module in model.named_modules():
        if isinstance(module, APASELayer):
            sources.append((name, module.gate))
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
        flat_ve = k_ve.reshape(-1)
        top = flat_ve.topk(max(1, flat_ve.numel() // 10)).values
        sums['passes'] += 1
        sums['k_ve_mean'] += float(flat_ve.mean())
        sums['k_ho_mean'] += float(k_ho.mean())
        sums['k_ve_top10_mean'] += float(top.mean())
        sums['saturation'] += float(
            (rho > SATURATION_THRESHOLD).float().mean())
        if not self.max_values:
            return
        values = self._values.setdefault(name, defaultdict(list))
        for key, t in (('k_ve', flat_ve), ('k_ho', k_ho.reshape(-1))):
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
