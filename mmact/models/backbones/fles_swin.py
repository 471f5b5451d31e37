"""Swin Transformer whose FFN activations know the token grid.

mmpretrain's ``SwinBlock`` passes its FFN ``(B, L, C)`` tokens without the
``(H, W)`` grid they come from, although the block itself receives it
(``hw_shape``). A windowed FleS indicator needs that grid.
:class:`FleSSwinTransformer` is mmpretrain's ``SwinTransformer`` with a
forward pre-hook on every block that hands the block's ``hw_shape`` to the
activations of its FFN (those with a ``token_hw_shape`` attribute, i.e.
FleS) before the block runs. Parameters and state-dict keys are those of
``SwinTransformer``, so ImageNet checkpoints of either load into the other.
"""
from copy import deepcopy
from typing import Optional, Sequence

import torch.nn as nn
from mmdet.registry import MODELS as MMDET_MODELS
from mmpretrain.models.backbones.swin_transformer import (SwinBlock,
                                                          SwinTransformer)
from mmpretrain.registry import MODELS as MMPRETRAIN_MODELS

__all__ = ['FleSSwinTransformer']


def _with_ffn_act(stage_cfgs, act_cfg: dict):
    """``stage_cfgs`` with ``act_cfg`` as the FFN activation of every block.

    Args:
        stage_cfgs (dict | Sequence[dict]): SwinTransformer's argument.
        act_cfg (dict): The activation config.
    """
    if isinstance(stage_cfgs, Sequence):
        return [_with_ffn_act(cfg, act_cfg) for cfg in stage_cfgs]
    stage = deepcopy(dict(stage_cfgs))
    blocks = stage.get('block_cfgs', dict())
    if isinstance(blocks, Sequence):
        blocks = [dict(b) for b in blocks]
        targets = blocks
    else:
        blocks = dict(blocks)
        targets = [blocks]
    for block in targets:
        block['ffn_cfgs'] = dict(
            block.get('ffn_cfgs', dict()), act_cfg=act_cfg)
    stage['block_cfgs'] = blocks
    return stage


def _grid_layers(block: nn.Module) -> list:
    """The FFN activations of a ``SwinBlock`` that take the token grid."""
    return [m for m in block.ffn.modules() if hasattr(m, 'token_hw_shape')]


def _share_hw_shape(block: nn.Module, args: tuple) -> None:
    """Forward pre-hook of a ``SwinBlock``: ``block(x, hw_shape)``. A plain
    function of the block (no ``partial``: torch 2.1's dynamo cannot call
    one, and a copied model must reach its own layers)."""
    hw_shape = tuple(args[1])
    for layer in _grid_layers(block):
        layer.token_hw_shape = hw_shape


@MMDET_MODELS.register_module()
@MMPRETRAIN_MODELS.register_module()
class FleSSwinTransformer(SwinTransformer):
    """mmpretrain ``SwinTransformer`` that tells FFN activations the grid.

    Before each ``SwinBlock`` runs, every FFN activation of that block with a
    ``token_hw_shape`` attribute (:class:`~mmact.models.activations.FleS`)
    receives the block's ``(H, W)`` token grid, so FleS can take its
    indicator over windows (``window_size`` or ``window_grid``) as on a
    convolutional feature map. Activations without the attribute (GELU, ...)
    are left alone.

    Args:
        *args: Positional arguments of mmpretrain's ``SwinTransformer``.
        act_cfg (dict, optional): Activation of every FFN, e.g.
            ``dict(type='FleS', window_grid=(9, 15))``. ``None`` (default)
            keeps what ``stage_cfgs`` says (GELU unless set there).
        **kwargs: Keyword arguments of ``SwinTransformer`` (``arch``,
            ``out_indices``, ``stage_cfgs``, ``init_cfg``, ...).
    """

    def __init__(self, *args, act_cfg: Optional[dict] = None, **kwargs):
        if act_cfg is not None:
            kwargs['stage_cfgs'] = _with_ffn_act(
                kwargs.get('stage_cfgs', dict()), act_cfg)
        super().__init__(*args, **kwargs)
        for block in self.modules():
            if not isinstance(block, SwinBlock):
                continue
            if _grid_layers(block):
                block.register_forward_pre_hook(_share_hw_shape)
