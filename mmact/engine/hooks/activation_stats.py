"""Log what the learned activations are doing while a model trains."""
from collections import defaultdict
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch
import torch.nn as nn
from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper
from mmengine.registry import HOOKS

from mmact.models.activations.base import (LearnableActivation,
                                           has_forward_stats)

__all__ = ['ActivationStatsHook']


class _ForwardStatsRecorder:
    """Forward pre-hooks collecting ``forward_stats`` of the given layers
    until :meth:`remove`."""

    def __init__(self, layers: List[Tuple[str, nn.Module]]) -> None:
        self._records: Dict[str, List[Dict[str, float]]] = defaultdict(list)
        self._handles = [
            module.register_forward_pre_hook(self._hook(name))
            for name, module in layers
        ]

    def _hook(self, name: str):

        def hook(module, inputs):
            with torch.no_grad():
                self._records[name].append(module.forward_stats(inputs[0]))

        return hook

    def remove(self) -> Dict[str, Dict[str, float]]:
        """Remove the hooks; layer name -> mean of each statistic over the
        recorded passes."""
        for handle in self._handles:
            handle.remove()
        return {
            name: {
                key: float(np.mean([r[key] for r in records]))
                for key in records[0]
            }
            for name, records in self._records.items()
        }


@HOOKS.register_module()
class ActivationStatsHook(Hook):
    """Log learned-activation statistics every ``interval`` iterations.

    Registered in mmengine's root ``HOOKS``, so any config (mmdet,
    mmpretrain, ...) can add it::

        custom_hooks = [dict(type='ActivationStatsHook', interval=50)]

    It reads what each learnable activation declares (see
    :class:`~mmact.models.activations.base.LearnableActivation`), so every
    activation is covered without listing types here. The values go to the
    runner's logger (one line) and to every visualizer backend
    (``add_scalars``: TensorBoard, W&B, ``scalars.json``), under:

    * ``{prefix}/{Type}.{name}_{mean,min,max}`` over all layers of a type for
      each value of ``activation_stats()``, e.g. ``act/AGLU.kappa_mean``,
      ``act/APA.lambda_max`` (APA is the gate of APA* attention),
      ``act/AReLU.alpha_min``; IGLU's ``sigma`` only when it is learnable.
    * ``{prefix}/{Type}.{name}``: each value of ``forward_stats()`` for that
      iteration's forward pass, averaged over the layers of a type (FleS:
      ``k_ve_mean``, ``k_ho_mean``, ``k_ve_top10_mean``, ``saturation``).
    * with ``per_layer=True`` also ``{prefix}/{layer}.{name}`` per layer
      (the mean over channels for per-channel values).

    Args:
        interval (int): Iterations between two logs. Defaults to 50.
        per_layer (bool): Also log every layer's values. Defaults to False.
        forward_stats (bool): Record input-dependent statistics (FleS
            scales) on the logging iterations; the layers compute them a
            second time in that forward. Defaults to True.
        prefix (str): Key prefix. Defaults to ``'act'``.
    """

    priority = 'NORMAL'

    def __init__(self,
                 interval: int = 50,
                 per_layer: bool = False,
                 forward_stats: bool = True,
                 prefix: str = 'act') -> None:
        if isinstance(interval, bool) or not isinstance(interval, int) \
                or interval < 1:
            raise ValueError(f'ActivationStatsHook: interval must be a '
                             f'positive int, got {interval!r}')
        self.interval = interval
        self.per_layer = per_layer
        self.forward_stats = forward_stats
        self.prefix = prefix
        self._recorder: Optional[_ForwardStatsRecorder] = None

    @staticmethod
    def _model(runner) -> nn.Module:
        model = runner.model
        return model.module if is_model_wrapper(model) else model

    def before_train_iter(self,
                          runner,
                          batch_idx: int,
                          data_batch=None) -> None:
        if not (self.forward_stats
                and self.every_n_train_iters(runner, self.interval)):
            return
        layers = [(name, m) for name, m in self._model(runner).named_modules()
                  if has_forward_stats(m)]
        if layers:
            self._recorder = _ForwardStatsRecorder(layers)

    def after_train_iter(self,
                         runner,
                         batch_idx: int,
                         data_batch=None,
                         outputs=None) -> None:
        if not self.every_n_train_iters(runner, self.interval):
            return
        model = self._model(runner)
        stats = self.parameter_stats(model)
        if self._recorder is not None:
            stats.update(self._forward_stats(model, self._recorder.remove()))
            self._recorder = None
        if not stats:
            return
        runner.visualizer.add_scalars(stats, step=runner.iter + 1)
        runner.logger.info('Activation stats: ' +
                           ', '.join(f'{key}: {value:.4g}'
                                     for key, value in stats.items()))

    def parameter_stats(self, model: nn.Module) -> Dict[str, float]:
        """Statistics of the learned values of ``model``'s activations.

        Args:
            model (nn.Module): The (unwrapped) model.

        Returns:
            dict[str, float]: Key -> value, keys as in the class docstring.
        """
        pooled = defaultdict(list)
        stats: Dict[str, float] = {}
        for name, module in model.named_modules():
            if not isinstance(module, LearnableActivation):
                continue
            for key, tensor in module.activation_stats().items():
                values = tensor.detach().double().cpu().reshape(-1).numpy()
                pooled[f'{type(module).__name__}.{key}'].append(values)
                if self.per_layer:
                    stats[f'{self.prefix}/{name}.{key}'] = float(values.mean())
        for key, chunks in pooled.items():
            values = np.concatenate(chunks)
            stats[f'{self.prefix}/{key}_mean'] = float(values.mean())
            stats[f'{self.prefix}/{key}_min'] = float(values.min())
            stats[f'{self.prefix}/{key}_max'] = float(values.max())
        return stats

    def _forward_stats(
            self, model: nn.Module,
            per_layer: Dict[str, Dict[str, float]]) -> Dict[str, float]:
        pooled = defaultdict(list)
        stats: Dict[str, float] = {}
        for name, values in per_layer.items():
            kind = type(model.get_submodule(name)).__name__
            for key, value in values.items():
                pooled[f'{kind}.{key}'].append(value)
                if self.per_layer:
                    stats[f'{self.prefix}/{name}.{key}'] = value
        for key, values in pooled.items():
            stats[f'{self.prefix}/{key}'] = float(np.mean(values))
        return stats
