"""``ActSwapBackbone``: any mmdet / mmpretrain backbone with swapped
activations, from a config."""
import copy
from typing import Optional, Sequence

import torch.nn as nn
from mmdet.registry import MODELS as MMDET_MODELS
from mmengine.registry import MODELS
from mmpretrain.registry import MODELS as MMPRETRAIN_MODELS

from mmact.models.utils.swap_fit import (DEFAULT_TOLERANCE, check_match_args,
                                      defer_match)
from mmact.models.utils.swap import (TypeSpec, resolve_types,
                                     replace_activations)

__all__ = ['ActSwapBackbone']


def _freeze_stem_activation(backbone: nn.Module) -> None:
    """Stock ResNets freeze only conv1/bn1 of the stem; a swapped learnable
    stem activation must follow ``frozen_stages`` too."""
    if getattr(backbone, 'frozen_stages', -1) >= 0 and isinstance(
            getattr(backbone, 'relu', None), nn.Module):
        for param in backbone.relu.parameters():
            param.requires_grad = False


@MMDET_MODELS.register_module()
@MMPRETRAIN_MODELS.register_module()
def ActSwapBackbone(backbone: dict,
                    act_cfg: dict,
                    target_types: Sequence[TypeSpec] = ('ReLU', ),
                    untie: bool = False,
                    exclude: Optional[Sequence[str]] = None,
                    match: bool = False,
                    tolerance: float = DEFAULT_TOLERANCE) -> nn.Module:
    """Build ``backbone`` and swap its activations (:func:`swap_activations`).

    A builder function, not a wrapper module: it returns the inner backbone
    itself, so state-dict keys, ``init_cfg``, ``frozen_stages`` and
    ``train()`` stay the upstream backbone's. The inner backbone is built in
    the current default scope (the config's ``default_scope``, which the
    Runner sets), so ``type='ResNet'`` is mmdet's ResNet in a detector and
    mmpretrain's in a classifier. Config use::

        backbone=dict(type='ActSwapBackbone', act_cfg=dict(type='AGLU'),
                      untie=True, backbone=dict(type='ResNet', depth=50, ...))

    Args:
        backbone (dict): Config of the backbone to build.
        act_cfg (dict): Config of the new activation, e.g.
            ``dict(type='AGLU')``.
        target_types (Sequence[type | str]): Classes to replace. Defaults to
            ``('ReLU', )``.
        untie (bool): Give every call position of the stock ResNet blocks'
            shared ``relu`` its own activation. Defaults to False.
        exclude (Sequence[str], optional): fnmatch patterns of module names
            to keep.
        match (bool): Fit every new activation to the one it replaces
            (function-preserving swap, :mod:`mmact.models.utils.swap_fit`). The
            fit runs on the backbone's first forward, after
            ``init_cfg=dict(type='Pretrained', ...)`` and ``load_from``
            loaded the weights it reads; activations whose parameters a
            checkpoint provides (resume, an mmact checkpoint) keep them.
            Defaults to False.
        tolerance (float): Relative RMS error per layer a fit to ReLU must
            reach (docs/design/swap.md). Defaults to 1e-2.

    Returns:
        nn.Module: The built backbone, activations swapped.
    """
    if match:  # refuse before the (possibly pretrained) backbone is built
        check_match_args(
            MODELS.build(copy.deepcopy(act_cfg)), resolve_types(target_types),
            tolerance)
    model = MODELS.build(backbone)
    swaps = replace_activations(model, act_cfg, target_types, untie, exclude)
    if match:
        defer_match(model, swaps, tolerance)
    # The new modules were created after upstream froze its stages.
    if hasattr(model, '_freeze_stages'):
        model._freeze_stages()
    _freeze_stem_activation(model)
    return model
