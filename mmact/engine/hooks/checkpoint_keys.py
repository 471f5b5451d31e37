"""Refuse (or loudly report) checkpoints that do not fit the model.

mmengine loads with ``strict=False`` and only logs the key lists, so a
detector tested with a classifier's checkpoint, or an AGLU model given plain
ResNet weights, runs to the end with random weights where the checkpoint had
none and reports a meaningless metric.

Weights trained with one activation and loaded into a model with another
(torchvision's or mmdet's ReLU ResNet-50 under an AGLU / APA* backbone, no
function-preserving swap) load every convolution and norm but no activation
parameter: :func:`activation_mismatch` finds that signature, and
:class:`CheckpointKeysHook` logs a warning naming the activations, for the
``Pretrained`` inits of the model and for ``load_from``.
"""
import logging
import re
from collections import OrderedDict
from typing import Dict, Iterator, List, NamedTuple, Optional, Tuple

import torch.nn as nn
from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.model import BaseTTAModel, is_model_wrapper
from mmengine.registry import HOOKS
from torch.nn.parameter import is_lazy

from mmact.models.activations.base import PENDING_MATCH, LearnableActivation

__all__ = [
    'KeyMismatch', 'CheckpointMismatchError', 'checkpoint_mismatch',
    'activation_mismatch', 'describe_activation_mismatch',
    'CheckpointKeysHook'
]

#: the page with the ways to start from weights of another activation
PRETRAINED_GUIDE = 'docs/user_guides/pretrained.md'

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


def _revised_state(checkpoint: Dict, prefix: Optional[str] = None) -> Dict:
    """The state dict mmengine loads from ``checkpoint``: ``state_dict`` (or
    the dict itself), ``module.`` stripped, or only the keys under
    ``prefix`` with the prefix stripped (a ``Pretrained`` init's)."""
    state = checkpoint.get('state_dict', checkpoint)
    revised = OrderedDict()
    for key, value in state.items():
        if not isinstance(key, str):
            continue
        if prefix:
            if not key.startswith(prefix):
                continue
            key = key[len(prefix):]
        else:
            for pattern, replacement in _REVISE_KEYS:
                key = re.sub(pattern, replacement, key)
        revised[key] = value
    return revised


def activation_mismatch(model: nn.Module,
                        checkpoint: Dict,
                        prefix: Optional[str] = None) -> Dict[str, List[str]]:
    """The learnable activations a checkpoint of other activations leaves
    at their initial values.

    The signature of weights trained with another activation (a ReLU
    ResNet's under an AGLU one): the checkpoint holds weights of the
    module around an activation (its block's convolutions and norms; for an
    activation directly under ``model``, any weight of ``model``) but none
    of the activation's own parameters. Activations that will be fitted to
    the ones they replace on the first forward
    (``ActSwapBackbone(match=True)``) are not reported.

    Args:
        model (nn.Module): The module the checkpoint is loaded into (model
            wrappers are unwrapped).
        checkpoint (dict): A loaded checkpoint or a state dict.
        prefix (str, optional): Load only the keys under this prefix, with
            the prefix stripped, as a ``Pretrained`` init's ``prefix``.

    Returns:
        dict[str, list[str]]: Activation class name -> the module names,
        in model order; empty when the checkpoint has every activation's
        parameters (or none of the model's weights).
    """
    if prefix and not prefix.endswith('.'):
        prefix += '.'
    keys = set(_revised_state(checkpoint, prefix))
    model = _unwrap(model)
    covered = {
        '.'.join(parts[:i])
        for parts in (key.split('.') for key in keys)
        for i in range(1, len(parts))
    }
    model_covered = bool(keys & set(model.state_dict()))
    found: Dict[str, List[str]] = OrderedDict()
    for name, module in model.named_modules():
        if not name or not isinstance(module, LearnableActivation) or \
                PENDING_MATCH in module.__dict__:
            continue
        params = [f'{name}.{p}' for p, _ in module.named_parameters()]
        if not params or any(p in keys for p in params):
            continue
        parts = name.split('.')
        ancestors = ['.'.join(parts[:i]) for i in range(len(parts) - 1, 0, -1)]
        if any(a in covered for a in ancestors) or (
                len(parts) == 1 and model_covered):
            found.setdefault(type(module).__name__, []).append(name)
    return found


def describe_activation_mismatch(found: Dict[str, List[str]],
                                 source: str = 'The checkpoint',
                                 first: int = 3) -> str:
    """The warning for :func:`activation_mismatch`'s result.

    Args:
        found (dict[str, list[str]]): Its result (not empty).
        source (str): What was loaded, for the message.
        first (int): How many module names of each class to show.
    """
    total = sum(len(group) for group in found.values())
    groups = []
    for kind, names in found.items():
        more = ', ...' if len(names) > first else ''
        groups.append(f'{len(names)} {kind}: {", ".join(names[:first])}{more}')
    return (
        f'{source} was trained with other activations: it holds the weights '
        f'around {total} learnable activations of the model '
        f'({"; ".join(groups)}) but none of their parameters, so these '
        'keep their initial values and the pretrained features change. Fit '
        'them to the activations they replace (ActSwapBackbone(match=True) '
        'or swap_activations(..., match=True)), or start from weights '
        f'trained with these activations ({PRETRAINED_GUIDE}).')


def _pretrained_inits(
        model: nn.Module) -> Iterator[Tuple[str, nn.Module, dict]]:
    """Modules of ``model`` that a ``Pretrained`` init_cfg will load, with
    that init_cfg."""
    for name, module in _unwrap(model).named_modules():
        if getattr(module, 'is_init', False):
            continue  # mmengine skips initialised modules
        init_cfg = getattr(module, 'init_cfg', None)
        for cfg in init_cfg if isinstance(init_cfg, list) else [init_cfg]:
            if isinstance(cfg, dict) and cfg.get('type') == 'Pretrained' \
                    and isinstance(cfg.get('checkpoint'), str):
                yield name, module, cfg


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
    revised = _revised_state(checkpoint)
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

    def before_run(self, runner) -> None:
        """Warn when a ``Pretrained`` init of the model holds weights
        trained with other activations (:func:`activation_mismatch`).

        Skipped when ``load_from`` or a resume will load the model after
        its init (:meth:`after_load_checkpoint` checks that checkpoint),
        and on every process but the main one (one more read of the file).
        """
        from mmengine.dist import is_main_process
        if getattr(runner, '_load_from', None) or getattr(
                runner, '_resume', False) or not is_main_process():
            return
        from mmengine.runner.checkpoint import CheckpointLoader

        from mmact.checkpoint import safe_checkpoint_loading
        for name, module, cfg in _pretrained_inits(runner.model):
            try:
                # through the allow-list wherever the hook runs (the tools'
                # own context, and its trusted files, still apply inside)
                with safe_checkpoint_loading():
                    checkpoint = CheckpointLoader.load_checkpoint(
                        cfg['checkpoint'], map_location='cpu',
                        logger='silent')
            except Exception:  # the init itself reports a bad file
                continue
            if not isinstance(checkpoint, dict):
                continue
            found = activation_mismatch(module, checkpoint, cfg.get('prefix'))
            if found:
                where = f' ({name}.init_cfg)' if name else ''
                print_log(
                    describe_activation_mismatch(
                        found, f'Pretrained {cfg["checkpoint"]}{where}'),
                    logger='current',
                    level=logging.WARNING)

    def after_load_checkpoint(self, runner, checkpoint: Dict) -> None:
        """Compare ``checkpoint`` with ``runner.model``."""
        mismatch = checkpoint_mismatch(runner.model, checkpoint)
        if not mismatch:
            return
        message = ('The checkpoint does not fit the model:\n' +
                   mismatch.describe())
        found = activation_mismatch(runner.model, checkpoint)
        if found:
            message += '\n' + describe_activation_mismatch(found)
        if self.strict:
            raise CheckpointMismatchError(message)
        print_log(message, logger='current', level=logging.WARNING)
