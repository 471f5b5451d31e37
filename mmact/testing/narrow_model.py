"""A shipped FPN detector's model at a few channels, for tests of tools.

:func:`narrow_fpn_detector` keeps a config's model types, activations,
attention, losses, heads and class count (an LVIS Mask R-CNN keeps its 1203
classes, GOL and CARAFE) and shrinks its widths: a ResNet-18 layout of
``width`` to ``8 * width`` channels (or the Bottleneck blocks of a ResNet-50
at a sixteenth of their channels), FPN, RPN and RoI heads at ``width``.
The paths a tool takes through the model are the same; a step costs a
fraction of the ResNet-50's. :func:`narrowing_options` gives the same
change as ``--cfg-options``, for a launcher that reads the shipped file.
"""
import copy
from typing import Any, Iterator, List, Tuple

from mmengine.config import ConfigDict

__all__ = ['narrow_fpn_detector', 'narrowing_options']


def _each(node: Any) -> list:
    """A head config, or each of a cascade's list."""
    if node is None:
        return []
    return list(node) if isinstance(node, (list, tuple)) else [node]


#: Output channels of a ResNet stage over its ``base_channels * 2**i``.
_EXPANSION = {18: 1, 34: 1, 50: 4, 101: 4, 152: 4}


def narrow_fpn_detector(model: ConfigDict,
                        width: int = 16,
                        depth: int = 18) -> ConfigDict:
    """Shrink the widths of a two-stage FPN detector config in place.

    Args:
        model (ConfigDict): ``cfg.model`` of a Faster / Mask / Cascade R-CNN
            config with an (Act)ResNet backbone.
        width (int): FPN and RoI channels, and the first stage's. At least
            16 (APA*'s squeeze-excitation divides the channels by 16).
            Defaults to 16.
        depth (int): The backbone's depth: 18 (basic blocks, the cheapest)
            or another ResNet depth (50: Bottleneck blocks, as the shipped
            configs'). Defaults to 18.

    Returns:
        ConfigDict: ``model``.
    """
    if depth not in _EXPANSION:
        raise ValueError(f'depth must be one of {sorted(_EXPANSION)}, got '
                         f'{depth!r}')
    model.backbone.update(
        depth=depth, base_channels=width, stem_channels=width)
    model.neck.update(
        in_channels=[width * _EXPANSION[depth] * 2**i for i in range(4)],
        out_channels=width)
    model.rpn_head.update(in_channels=width, feat_channels=width)
    roi_head = model.roi_head
    for key in ('bbox_roi_extractor', 'mask_roi_extractor'):
        for extractor in _each(roi_head.get(key)):
            extractor.out_channels = width
    for head in _each(roi_head.get('bbox_head')):
        head.update(in_channels=width, fc_out_channels=2 * width)
    for head in _each(roi_head.get('mask_head')):
        head.update(in_channels=width, conv_out_channels=width)
    return model


def _changed(old: Any, new: Any, path: str) -> Iterator[Tuple[str, Any]]:
    """Dotted paths and new values of the leaves where two trees differ."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in new:
            yield from _changed(old.get(key), new[key], f'{path}.{key}')
    elif old != new:
        yield path, new


def _option_value(path: str, value: Any) -> str:
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        return '[' + ','.join(map(str, value)) + ']'
    raise ValueError(f'{path}: narrowing_options writes integers and lists '
                     f'of integers, got {value!r} (a cascade\'s list of '
                     'heads needs narrow_fpn_detector on the config)')


def narrowing_options(model: ConfigDict,
                      width: int = 16,
                      depth: int = 18) -> List[str]:
    """The ``--cfg-options`` items (``model.KEY=VALUE``) that narrow a
    config's model as :func:`narrow_fpn_detector` does.

    Args:
        model (ConfigDict): ``cfg.model`` of a Faster / Mask R-CNN config
            with an (Act)ResNet backbone; left unchanged.
        width (int): As :func:`narrow_fpn_detector`'s. Defaults to 16.
        depth (int): As :func:`narrow_fpn_detector`'s. Defaults to 18.

    Returns:
        list[str]: One item per changed key, for ``--cfg-options``.
    """
    narrow = narrow_fpn_detector(copy.deepcopy(model), width, depth)
    return [
        f'{path}={_option_value(path, value)}'
        for path, value in _changed(model, narrow, 'model')
    ]
