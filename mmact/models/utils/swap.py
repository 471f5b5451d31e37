"""Replace activation modules inside an already built model.

:func:`swap_activations` walks a model and replaces every module of the given
classes (``nn.ReLU`` by default) by a module built from a registered config
(e.g. ``dict(type='AGLU')``). :func:`mmact.models.backbones.ActSwapBackbone`
does the same from a config file, for any backbone of mmdet or mmpretrain.

Shared modules stay shared. A module object is replaced by ONE new module at
every place it is registered, and a module that the parent's ``forward``
calls at several positions (mmdet's and mmpretrain's ResNet blocks call one
``relu`` three times) becomes one learnable activation with one set of
parameters for all of those positions -- unlike the reference APA code, which
gives every position its own parameters. Two ways to untie them:

- ``untie=True`` (or :func:`untie_activations`) for the stock ResNet family
  blocks listed in :func:`known_shared_activations`: the shared ``relu`` is
  replaced by per-position copies ``act1``/``act2``/``act3`` (the key names of
  :class:`mmact.models.backbones.ActResNet`) and a parameter-free dispatcher
  that sends the k-th call of each block forward to the k-th copy.
- Use ``ActResNet`` directly, which builds one module per position.
"""
import copy
import sys
from fnmatch import fnmatch
from typing import (Callable, Dict, Iterable, List, Optional, Sequence, Tuple,
                    Type, Union)

import torch
import torch.nn as nn
from mmengine.logging import print_log
from mmengine.registry import MODELS

from .swap_fit import (DEFAULT_TOLERANCE, Swap, check_match_args,
                    check_matchable, format_records, input_moments,
                    match_activations)

__all__ = [
    'swap_activations', 'replace_activations', 'untie_activations',
    'known_shared_activations', 'resolve_types'
]

TypeSpec = Union[str, Type[nn.Module]]

# (module, class, attribute, number of call sites per forward). Only exact
# classes whose forward is known to call `relu` once per position in order,
# with the last call outside the checkpointed part; subclasses with other
# forwards (e.g. Res2Net's Bottle2neck) call it a different number of times.
_KNOWN_SHARED = (
    ('mmpretrain.models.backbones.resnet', 'BasicBlock', 'relu', 2),
    ('mmpretrain.models.backbones.resnet', 'Bottleneck', 'relu', 3),
    ('mmpretrain.models.backbones.resnext', 'Bottleneck', 'relu', 3),
    ('mmpretrain.models.backbones.seresnet', 'SEBottleneck', 'relu', 3),
    ('mmpretrain.models.backbones.seresnext', 'SEBottleneck', 'relu', 3),
    ('mmdet.models.backbones.resnet', 'BasicBlock', 'relu', 2),
    ('mmdet.models.backbones.resnet', 'Bottleneck', 'relu', 3),
    ('mmdet.models.backbones.resnext', 'Bottleneck', 'relu', 3),
)


def known_shared_activations() -> Dict[type, Tuple[str, int]]:
    """Block classes of mmdet and mmpretrain whose one activation module is
    called at several positions.

    Only the classes of modules already imported: a model can hold a block
    only once its module is imported, and mmdet's models cannot be imported
    where mmcv's compiled ops do not load.

    Returns:
        dict: ``{block_class: (attribute, number_of_call_sites)}``.
    """
    table = {}
    for module_name, cls_name, attr, sites in _KNOWN_SHARED:
        module = sys.modules.get(module_name)
        if module is not None:
            table[getattr(module, cls_name)] = (attr, sites)
    return table


class _CallSites(nn.Module):
    """Send the k-th call within one forward of the owner to ``owner.act{k}``.

    The per-position modules are registered on the owner (``act1``,
    ``act2``, ...), not here, so the state dict has one entry per position
    and none for this dispatcher, and a later swap that replaces
    ``owner.act2`` is picked up (lookup by name at call time). The owner's
    forward pre-hook resets the counter; the counter is taken modulo the
    number of sites, so a checkpointed block (``with_cp=True``) that
    recomputes its inner part in backward, i.e. the first ``k - 1`` calls,
    reaches the right modules again.

    Args:
        owner (nn.Module): Block whose forward calls this module.
        names (sequence[str]): Attribute names of the sites, in call order.
    """

    def __init__(self, owner: nn.Module, names: Sequence[str]) -> None:
        super().__init__()
        # A plain list keeps the owner unregistered (no cycle in
        # named_modules); deepcopy and pickle map it to the copied owner.
        self._owner = [owner]
        self._names = tuple(names)
        self._calls = 0

    def reset(self, *args) -> None:
        """Forward pre-hook of the owner: a new forward starts."""
        self._calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        name = self._names[self._calls % len(self._names)]
        self._calls += 1
        return getattr(self._owner[0], name)(x)

    def extra_repr(self) -> str:
        return f'dispatches to {", ".join(self._names)}'


def untie_activations(
        model: nn.Module,
        owners: Optional[Dict[type, Tuple[str, int]]] = None) -> List[str]:
    """Give every call position of a shared block activation its own copy.

    Args:
        model (nn.Module): Model to modify in place.
        owners (dict, optional): ``{block_class: (attribute, sites)}``; exact
            class match. Defaults to :func:`known_shared_activations`.

    Returns:
        list[str]: Names of the blocks that were untied.
    """
    owners = known_shared_activations() if owners is None else owners
    untied = []
    for name, block in model.named_modules():
        spec = owners.get(type(block))
        if spec is None:
            continue
        attr, num_sites = spec
        shared = getattr(block, attr, None)
        if not isinstance(shared, nn.Module) or isinstance(shared, _CallSites):
            continue
        site_names = [f'act{i + 1}' for i in range(num_sites)]
        taken = [n for n in site_names if hasattr(block, n)]
        if taken:
            raise ValueError(f'cannot untie {name or type(block).__name__}: '
                             f'it already has attributes {taken}')
        for site_name in site_names:
            block.add_module(site_name, copy.deepcopy(shared))
        dispatcher = _CallSites(block, site_names)
        setattr(block, attr, dispatcher)
        block.register_forward_pre_hook(dispatcher.reset)
        untied.append(name)
    return untied


def resolve_types(
        target_types: Union[TypeSpec, Sequence[TypeSpec]]) -> Tuple[type, ...]:
    """Module classes from classes or names (torch.nn or registered).

    Args:
        target_types (type | str | sequence): e.g. ``('ReLU', nn.SiLU)``.
    """
    if isinstance(target_types, (str, type)):
        target_types = (target_types, )
    resolved = []
    for spec in target_types:
        if isinstance(spec, str):
            cls = getattr(nn, spec, None) or MODELS.get(spec)
            if not isinstance(cls, type):
                raise KeyError(f'target type {spec!r} is neither a torch.nn '
                               'class nor a registered module class')
            spec = cls
        if not (isinstance(spec, type) and issubclass(spec, nn.Module)):
            raise TypeError(f'target types must be nn.Module classes or '
                            f'their names, got {spec!r}')
        resolved.append(spec)
    return tuple(resolved)


def replace_activations(
        model: nn.Module,
        act_cfg: dict,
        target_types: Union[TypeSpec, Sequence[TypeSpec]] = (nn.ReLU, ),
        untie: bool = False,
        exclude: Optional[Sequence[str]] = None,
        before: Optional[Callable[[List[Swap]], None]] = None) -> List[Swap]:
    """:func:`swap_activations` without the fit, returning what it did, for
    callers that fit the new modules themselves.

    Args:
        model (nn.Module): Any built model.
        act_cfg (dict): Config of the new activation.
        target_types (type | str | sequence): Classes to replace.
        untie (bool): Call :func:`untie_activations` first.
        exclude (sequence[str], optional): fnmatch patterns of module names
            to keep.
        before (callable, optional): Called with the triples after the new
            modules are built and before any is put into ``model``.

    Returns:
        list[tuple]: ``(name, new, replaced)`` for every name of every
        replaced module.
    """
    if not isinstance(act_cfg, dict) or 'type' not in act_cfg:
        raise TypeError(f'act_cfg must be a dict with "type", got {act_cfg!r}')
    types_ = resolve_types(target_types)
    if untie:
        untie_activations(model)
    new_by_old: Dict[int, nn.Module] = {}
    new_ids = set()
    places = []
    for parent_name, parent in list(
            model.named_modules(remove_duplicate=False)):
        for child_name, child in list(parent._modules.items()):
            full = f'{parent_name}.{child_name}' if parent_name else child_name
            if (child is None or id(child) in new_ids
                    or not isinstance(child, types_)):
                continue
            if exclude and any(fnmatch(full, pat) for pat in exclude):
                continue
            if id(child) not in new_by_old:
                # MODELS.build is what mmcv's build_activation_layer does
                new = MODELS.build(copy.deepcopy(act_cfg))
                new_by_old[id(child)] = new
                new_ids.add(id(new))
            places.append((parent, child_name, full, child))
    swaps = [(full, new_by_old[id(child)], child)
             for _, _, full, child in places]
    if before is not None:
        before(swaps)
    for parent, child_name, _, child in places:
        setattr(parent, child_name, new_by_old[id(child)])
    return swaps


def swap_activations(
        model: nn.Module,
        act_cfg: dict,
        target_types: Union[TypeSpec, Sequence[TypeSpec]] = (nn.ReLU, ),
        untie: bool = False,
        exclude: Optional[Sequence[str]] = None,
        match: bool = False,
        tolerance: float = DEFAULT_TOLERANCE,
        example_input: Union[torch.Tensor, Sequence[int], None] = None,
        calibration: Optional[Iterable] = None) -> List[str]:
    """Replace activation modules of ``model`` in place.

    A module object registered under several names, or called at several
    positions by its parent, is replaced by one shared new module (see the
    module docstring); pass ``untie=True`` to split the known ResNet blocks'
    shared ``relu`` first.

    With ``match=True`` each new activation is fitted to the one it
    replaces (:mod:`mmact.models.utils.swap_fit`): Sigmoid -> APA and
    SiLU -> AGLU exactly, ReLU -> AGLU with the smallest kappa within
    ``tolerance``, GELU -> AGLU by the best fit. Load the pretrained
    weights first: the fit reads the BatchNorms.

    Args:
        model (nn.Module): Any built model (a backbone, a detector, ...).
        act_cfg (dict): Config of the new activation, e.g.
            ``dict(type='AGLU')``; built once per replaced module.
        target_types (type | str | sequence): Classes to replace (exact or
            subclasses), as classes or names (``'ReLU'``). Defaults to
            ``nn.ReLU``.
        untie (bool): Call :func:`untie_activations` first. Defaults to False.
        exclude (sequence[str], optional): fnmatch patterns of module names to
            keep, e.g. ``['*.se_layer.*']`` to leave attention internals.
        match (bool): Fit the new activations to the replaced ones. Defaults
            to False (their init ranges).
        tolerance (float): Relative RMS error per layer that a fit to a
            limit of the family (ReLU) must reach, and above which a fit is
            reported in a warning. Defaults to 1e-2.
        example_input (Tensor | sequence[int], optional): Input or input
            shape of the data-free forward; defaults to ``(4, C, 224, 224)``,
            C the input channels of the first ``Conv2d``.
        calibration (iterable, optional): Batches ``model`` is called on to
            measure the inputs instead (eval mode).

    Returns:
        list[str]: Names of the replaced modules (every name of a shared one).
    """
    if match:
        check_match_args(
            MODELS.build(copy.deepcopy(act_cfg)), resolve_types(target_types),
            tolerance)
    moments = {}

    def measure(swaps):
        check_matchable(swaps)
        moments.update(
            input_moments(model, swaps, example_input, calibration))

    swaps = replace_activations(model, act_cfg, target_types, untie, exclude,
                                measure if match else None)
    if match:
        records = match_activations(swaps, moments, tolerance)
        print_log(format_records(records), logger='current')
    return [name for name, _, _ in swaps]
