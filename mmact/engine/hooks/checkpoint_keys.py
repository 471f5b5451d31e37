"""Refuse (or loudly report) checkpoints that do not fit the model.

mmengine loads with ``strict=False`` and only logs the key lists, so a
detector tested with a classifier's checkpoint, or an AGLU model given plain
ResNet weights, runs to the end with random weights where the checkpoint had
none and reports a meaningless metric.
"""
import logging
import re
from collections import OrderedDict
from typing import Dict, List, NamedTuple

import torch.nn as nn
from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.model import BaseTTAModel, is_model_wrapper
from mmengine.registry import HOOKS
from torch.nn.parameter import is_lazy

from mmact.models.activations.base import PENDING_MATCH

__all__ = [
    'KeyMismatch', 'CheckpointMismatchError', 'checkpoint_mismatch',
    'CheckpointKeysHook'
]

# What mmengine's Runner.load_checkpoint strips from checkpoint keys.
_REVISE_KEYS = ((r'^module\.', ''), )


class KeyMismatch(NamedTuple):
    """How a state dict differs from a model's.

    Attributes:
        missing (list[str]): Model keys the state dict lacks.
        unexpected (list[str]): State dict keys the model lacks.
        shape (list[str]): ``'key: checkpoint (a, b) vs model (c, d)'``.
        total (int): Number of model keys.
    """
    missing: List[str]
    unexpected: List[str]
    shape: List[str]
    total: int

    def __bool__(self) -> bool:
        return bool(self.missing or self.unexpected or self.shape)

    def describe(self, first: int = 5) -> str:
        """One line per kind of difference, with the first few keys."""
        lines = []
        for items, what in ((self.missing, f'of {self.total} model keys are '
                             'missing from the checkpoint (left at their '
                             'initial values)'),
                            (self.unexpected, 'checkpoint keys are not in '
                             'the model'), (self.shape,
                                            'keys have another shape in the '
                                            'checkpoint (not loaded)')):
            if items:
                more = ', ...' if len(items) > first else ''
                lines.append(f'{len(items)} {what}: '
                             f'{", ".join(items[:first])}{more}')
        return '\n'.join(lines)


class CheckpointMismatchError(RuntimeError):
    """A checkpoint leaves model weights unloaded or has foreign keys."""


def _unwrap(model: nn.Module) -> nn.Module:
    """The module mmengine loads a checkpoint into."""
    while is_model_wrapper(model) or isinstance(model, BaseTTAModel):
        model = model.module
    return model


def checkpoint_mismatch(model: nn.Module, checkpoint: Dict) -> KeyMismatch:
    """Compare a checkpoint with a model the way mmengine loads it.

    Keys are revised as ``Runner.load_checkpoint`` does (``module.`` prefix
    stripped); model wrappers and test-time-augmentation models are
    unwrapped; ``num_batches_tracked`` counters, which mmengine does not
    require either, are not reported missing, nor are the parameters of
    activations that will be fitted to the ones they replaced on the first
    forward (``ActSwapBackbone(match=True)``: a ReLU checkpoint is what they
    start from). Lazy parameters (FleS before its first forward) take the
    checkpoint's shape and are not compared.

    Args:
        model (nn.Module): The model the checkpoint will be loaded into.
        checkpoint (dict): A loaded checkpoint (with ``state_dict``) or a
            state dict.

    Returns:
        KeyMismatch: Falsy when the checkpoint fits exactly.
    """
    state = checkpoint.get('state_dict', checkpoint)
    revised = OrderedDict()
    for key, value in state.items():
        for pattern, replacement in _REVISE_KEYS:
            key = re.sub(pattern, replacement, key)
        revised[key] = value
    model = _unwrap(model)
    expected = model.state_dict()
    to_fit = {
        f'{name}.{param}' if name else param
        for name, module in model.named_modules()
        if PENDING_MATCH in module.__dict__
        for param, _ in module.named_parameters(recurse=False)
    }
    missing = [
        key for key in expected if key not in revised and key not in to_fit
        and not key.endswith('num_batches_tracked')
    ]
    unexpected = [key for key in revised if key not in expected]
    shape = []
    for key, value in expected.items():
        loaded = revised.get(key)
        if loaded is None or is_lazy(value) or not hasattr(loaded, 'shape'):
            continue
        if tuple(loaded.shape) != tuple(value.shape):
            shape.append(f'{key}: checkpoint {tuple(loaded.shape)} vs model '
                         f'{tuple(value.shape)}')
    return KeyMismatch(missing, unexpected, shape, len(expected))


@HOOKS.register_module()
class CheckpointKeysHook(Hook):
    """Check every loaded checkpoint against the model before it is loaded.

    ``tools/test.py`` adds it with ``strict=True`` (a checkpoint that does
    not fit stops the run; ``--allow-partial`` turns that off) and
    ``tools/train.py`` with ``strict=False`` (``load_from`` for fine-tuning
    may legitimately cover part of the model, so it warns). Any config can
    use it: ``custom_hooks = [dict(type='CheckpointKeysHook')]``.

    Args:
        strict (bool): Raise :class:`CheckpointMismatchError` instead of
            logging a warning. Defaults to True.
    """

    # After every other hook has edited the checkpoint (e.g. EMA swaps).
    priority = 'VERY_LOW'

    def __init__(self, strict: bool = True) -> None:
        self.strict = strict

    def after_load_checkpoint(self, runner, checkpoint: Dict) -> None:
        """Compare ``checkpoint`` with ``runner.model``."""
        mismatch = checkpoint_mismatch(runner.model, checkpoint)
        if not mismatch:
            return
        message = ('The checkpoint does not fit the model:\n' +
                   mismatch.describe())
        if self.strict:
            raise CheckpointMismatchError(message)
        print_log(message, logger='current', level=logging.WARNING)
