"""Optimizer param-group helper: no weight decay on activation parameters.

The APA/AGLU paper (000, App. "Implementation details") trains kappa and
lambda without weight decay; the same holds for AReLU's alpha/beta and a
learnable IGLU sigma.
"""
from typing import Dict, Optional

import torch.nn as nn

__all__ = ['ACTIVATION_PARAM_KEYS', 'activation_paramwise_cfg']

#: Keys that only mmact activation parameters carry (mmengine matches a
#: custom key as a substring of ``<module path>.<param name>``).
ACTIVATION_PARAM_KEYS = ('.kappa_param', '.lambda_param')


def _activation_types() -> tuple:
    # the element-wise activations whose parameters are all shape scalars
    from mmact.models.activations import AGLU, APA, IGLU, AReLU, IGLUApprox
    return (APA, AGLU, AReLU, IGLU, IGLUApprox)


def activation_paramwise_cfg(model: Optional[nn.Module] = None,
                             decay_mult: float = 0.0,
                             **extra_paramwise) -> Dict:
    """Return an mmengine ``paramwise_cfg`` that exempts activation
    parameters from weight decay.

    Without ``model`` the keys are ``'.kappa_param'`` and ``'.lambda_param'``
    (APA, AGLU and everything built on them, e.g. APA* attention); these
    names occur nowhere else, so conv / norm weights are never matched.
    AReLU's ``alpha`` / ``beta`` and IGLU's ``sigma`` have generic names that
    other layers also use (e.g. mmdet's AutoAssign head has a ``sigma``), so
    they are covered only when ``model`` is given: every parameter of an
    APA, AGLU, AReLU, IGLU or IGLUApprox module is then listed by its full
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
        types = _activation_types()
        for mod_name, module in model.named_modules():
            if isinstance(module, types):
                for p_name, _ in module.named_parameters(recurse=False):
                    keys.append(
                        f'{mod_name}.{p_name}' if mod_name else f'.{p_name}')
    custom_keys = {key: dict(decay_mult=decay_mult) for key in keys}
    custom_keys.update(extra_paramwise.pop('custom_keys', {}) or {})
    return dict(custom_keys=custom_keys, **extra_paramwise)
