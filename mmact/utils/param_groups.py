"""Optimizer param-group helper: no weight decay on activation parameters.

Configs use ``ActivationOptimWrapperConstructor`` (it reads the same
protocol at build time); this helper writes the equivalent mmengine
``paramwise_cfg`` for code that builds its optimizer itself or must keep
the default constructor.
"""
from typing import Dict, Optional

import torch.nn as nn

from mmact.models.activations import APA
from mmact.models.activations.base import no_decay_parameters

__all__ = ['ACTIVATION_PARAM_KEYS', 'activation_paramwise_cfg']

#: Keys that only APA / AGLU parameters carry (mmengine matches a custom key
#: as a substring of ``<module path>.<param name>``).
ACTIVATION_PARAM_KEYS = tuple(f'.{name}' for name in APA.no_decay_params)


def activation_paramwise_cfg(model: Optional[nn.Module] = None,
                             decay_mult: float = 0.0,
                             **extra_paramwise) -> Dict:
    """Return an mmengine ``paramwise_cfg`` that exempts activation
    parameters from weight decay.

    Without ``model`` the keys are ``'.kappa_param'`` and ``'.lambda_param'``
    (APA, AGLU and everything built on them, e.g. APA* attention); these
    names occur nowhere else, so conv / norm weights are never matched.
    Other activations' parameters have generic names that other layers also
    use (e.g. mmdet's AutoAssign head has a ``sigma``), so they are covered
    only when ``model`` is given: every parameter a learnable activation of
    the model declares in ``no_decay_params`` is then listed by its full
    name.

    Example:
        >>> optim_wrapper = dict(
        ...     optimizer=dict(type='SGD', lr=0.1, weight_decay=1e-4),
        ...     paramwise_cfg=activation_paramwise_cfg(model))

    Args:
        model (nn.Module, optional): Built model to scan for activation
            modules. Defaults to None (name-based keys only).
        decay_mult (float): Weight-decay multiplier for these parameters.
            Defaults to 0.0.
        **extra_paramwise: Other ``paramwise_cfg`` fields to keep (e.g.
            ``norm_decay_mult=0.0``); a ``custom_keys`` dict given here is
            merged, its entries taking precedence.

    Returns:
        dict: ``dict(custom_keys={key: dict(decay_mult=decay_mult)}, ...)``.
    """
    if not decay_mult >= 0:
        raise ValueError(f'decay_mult must be >= 0, got {decay_mult}')
    keys = list(ACTIVATION_PARAM_KEYS)
    if model is not None:
        if not isinstance(model, nn.Module):
            raise TypeError('model must be an nn.Module, got '
                            f'{type(model).__name__}')
        # mmengine matches '.<name>' for a parameter of the root module
        keys += [
            name if '.' in name else f'.{name}'
            for name, _ in no_decay_parameters(model)
        ]
    custom_keys = {key: dict(decay_mult=decay_mult) for key in keys}
    custom_keys.update(extra_paramwise.pop('custom_keys', {}) or {})
    return dict(custom_keys=custom_keys, **extra_paramwise)
