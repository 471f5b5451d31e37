"""Log what the learned activations are doing while a model trains."""
from collections import defaultdict
from typing import Dict, Optional

import numpy as np
from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper
from mmengine.registry import HOOKS

from mmact.analysis.probes import (FleSRecorder, activation_parameters,
                                   find_modules)
from mmact.models.activations import IGLU, FleS, IGLUApprox

__all__ = ['ActivationStatsHook']


@HOOKS.register_module()
class ActivationStatsHook(Hook):
    """Log learned-activation statistics every ``interval`` iterations.

    Registered in mmengine's root ``HOOKS``, so any config (mmdet,
    mmpretrain, ...) can add it::

        custom_hooks = [dict(type='ActivationStatsHook', interval=50)]

    The values go to the runner's logger (one line) and to every visualizer
    backend (``add_scalars``: TensorBoard, W&B, ``scalars.json``), under:

    * ``{prefix}/{Type}.{param}_{mean,min,max}`` over all layers of a type,
      e.g. ``act/AGLU.kappa_mean``, ``act/APA.lambda_max`` (APA is the gate
      of APA* attention), ``act/AReLU.alpha_min``; IGLU's ``sigma`` only when
      it is learnable.
    * ``{prefix}/FleS.{k_ve_mean,k_ho_mean,k_ve_top10_mean,saturation}``:
      the FleS scales of that iteration's forward pass, averaged over layers
      (saturation: share of gate values above 0.9, FleS App. E.1).
    * with ``per_layer=True`` also ``{prefix}/{layer}.{param}`` per layer
      (the mean over channels for per-channel parameters).

    Args:
        interval (int): Iterations between two logs. Defaults to 50.
        per_layer (bool): Also log every layer's values. Defaults to False.
        fles_scales (bool): Record FleS scales on the logging iterations
            (the layers compute their scales a second time in that forward).
            Defaults to True.
        prefix (str): Key prefix. Defaults to ``'act'``.
    """

    priority = 'NORMAL'

    def __init__(self,
                 interval: int = 50,
                 per_layer: bool = False,
                 fles_scales: bool = True,
                 prefix: str = 'act') -> None:
        if isinstance(interval, bool) or not isinstance(interval, int) \
                or interval < 1:
            raise ValueError(f'ActivationStatsHook: interval must be a '
                             f'positive int, got {interval!r}')
        self.interval = interval
        self.per_layer = per_layer
        self.fles_scales = fles_scales
        self.prefix = prefix
        self._recorder: Optional[FleSRecorder] = None

    @staticmethod
    def _model(runner):
        model = runner.model
        return model.module if is_model_wrapper(model) else model

    def before_train_iter(self, runner, batch_idx: int,
                          data_batch=None) -> None:
        if not (self.fles_scales
                and self.every_n_train_iters(runner, self.interval)):
            return
        model = self._model(runner)
        if find_modules(model, (FleS, )):
            self._recorder = FleSRecorder(model, max_values=0).__enter__()

    def after_train_iter(self,
                         runner,
                         batch_idx: int,
                         data_batch=None,
                         outputs=None) -> None:
        if not self.every_n_train_iters(runner, self.interval):
            return
        stats = self.parameter_stats(self._model(runner))
        if self._recorder is not None:
            self._recorder.__exit__(None, None, None)
            stats.update(self._fles_stats(self._recorder))
            self._recorder = None
        if not stats:
            return
        runner.visualizer.add_scalars(stats, step=runner.iter + 1)
        runner.logger.info('Activation stats: ' + ', '.join(
            f'{key}: {value:.4g}' for key, value in stats.items()))

    def parameter_stats(self, model) -> Dict[str, float]:
        """Statistics of the learned parameters of ``model``'s activations.

        Args:
            model (nn.Module): The (unwrapped) model.

        Returns:
            dict[str, float]: Key -> value, keys as in the class docstring.
        """
        pooled = defaultdict(list)
        stats: Dict[str, float] = {}
        for name, module in find_modules(model):
            if isinstance(module, (IGLU, IGLUApprox)) \
                    and not module.learnable_sigma:
                continue
            for param, values in activation_parameters(module).items():
                pooled[f'{type(module).__name__}.{param}'].append(values)
                if self.per_layer:
                    stats[f'{self.prefix}/{name}.{param}'] = float(
                        values.mean())
        for key, chunks in pooled.items():
            values = np.concatenate(chunks)
            stats[f'{self.prefix}/{key}_mean'] = float(values.mean())
            stats[f'{self.prefix}/{key}_min'] = float(values.min())
            stats[f'{self.prefix}/{key}_max'] = float(values.max())
        return stats

    def _fles_stats(self, recorder: FleSRecorder) -> Dict[str, float]:
        summary = recorder.summary()
        stats: Dict[str, float] = {}
        if not summary:
            return stats
        for key in next(iter(summary.values())):
            stats[f'{self.prefix}/FleS.{key}'] = float(
                np.mean([layer[key] for layer in summary.values()]))
        if self.per_layer:
            for name, layer in summary.items():
                for key, value in layer.items():
                    stats[f'{self.prefix}/{name}.{key}'] = value
        return stats
