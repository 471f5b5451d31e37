"""Materialise lazy modules (FleS, Meta-ACON without ``channels``) before
optimizers, DDP or ``init_weights`` see the model.

:func:`materialize_lazy_modules` runs one no-grad dry forward in eval mode;
the ``MaterializedModel`` config builder (root ``MODELS``) builds a model and
does the same, returning the model itself so checkpoints keep their keys.
"""
from typing import Callable, Optional, Sequence

import torch
import torch.nn as nn
from mmengine.model import BaseModel
from mmengine.registry import MODELS
from torch.nn.modules.lazy import LazyModuleMixin

__all__ = ['materialize_lazy_modules', 'build_materialized_model']


def _uninitialized(model: nn.Module) -> list:
    return [
        name for name, module in model.named_modules()
        if isinstance(module, LazyModuleMixin)
        and module.has_uninitialized_params()
    ]


def materialize_lazy_modules(model: nn.Module,
                             *inputs,
                             forward: Optional[Callable] = None,
                             **kwargs) -> nn.Module:
    """Materialise every lazy module of ``model`` with one dry-run forward.

    Runs ``forward(*inputs, **kwargs)`` (default: ``model`` itself) under
    ``torch.no_grad()`` with all modules of ``model`` in eval mode (so BN
    statistics and dropout are untouched), then restores each module's own
    training flag. Does nothing when no lazy module is left. Call it before
    building the optimizer, wrapping in DDP or calling ``init_weights``.

    Args:
        model: the model whose lazy modules must be materialised.
        *inputs, **kwargs: arguments of the dry-run call.
        forward: what to call, e.g. ``model.backbone`` or
            ``model.extract_feat``; defaults to ``model``.

    Raises:
        RuntimeError: if some lazy modules were not reached by the forward.
    """
    if not _uninitialized(model):
        return model
    flags = {m: m.training for m in model.modules()}
    model.eval()
    try:
        with torch.no_grad():
            (model if forward is None else forward)(*inputs, **kwargs)
    finally:
        for module, flag in flags.items():
            module.training = flag
    left = _uninitialized(model)
    if left:
        raise RuntimeError('materialize_lazy_modules: the dry run did not '
                           f'reach these lazy modules: {left}')
    return model


@MODELS.register_module(name='MaterializedModel')
def build_materialized_model(
        model: dict,
        input_shape: Sequence[int] = (1, 3, 224, 224),
        submodule: Optional[str] = None,
        data_preprocessor: Optional[dict] = None) -> nn.Module:
    """Config builder: build ``model`` and materialise its lazy modules.

    Returns the built model itself (not a wrapper), so checkpoints keep their
    keys.

    Args:
        model (dict): Config of the model to build.
        input_shape (Sequence[int]): Shape of the zeros fed in the dry run.
        submodule (str, optional): Run the dry run on ``model.<submodule>``
            (e.g. ``'backbone'`` for detectors, whose full forward needs data
            samples) instead of the whole model. mmengine ``BaseModel``\\ s
            are called with ``mode='tensor'``.
        data_preprocessor (dict, optional): The Runner passes a config's
            top-level ``data_preprocessor`` to the outermost model config;
            it goes to ``model`` unless that sets its own.
    """
    if data_preprocessor is not None:
        model = dict(model)
        model.setdefault('data_preprocessor', data_preprocessor)
    built = MODELS.build(model)
    target = built if submodule is None else built.get_submodule(submodule)
    kwargs = dict(mode='tensor') if isinstance(target, BaseModel) else {}
    return materialize_lazy_modules(
        built, torch.zeros(*input_shape), forward=target, **kwargs)
