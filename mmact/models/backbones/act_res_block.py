"""The residual block of ActResNet, once for mmdet's and mmpretrain's blocks.

:class:`ActBlockMixin` goes in front of an upstream ``BasicBlock`` /
``Bottleneck`` (mmdet's or mmpretrain's): upstream builds the convolutions,
norms, shortcut, DCN, plugins and drop path with its own names, so state-dict
keys stay upstream's; the mixin replaces upstream's single shared ``relu`` by
one activation per position (``act1`` ... ``actN``), adds the optional
attention ``attn`` and runs one forward for every block::

    conv1-norm1-act1 [plugins] ... convN-normN [plugins] attn, add, actN

(mmdet's plugins after each convolution; mmpretrain's drop path on the
branch before the add). The memory-lean path (:mod:`.recompute`) computes
the same function.
"""
from typing import Callable, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.utils.checkpoint as cp
from mmcv.cnn import build_activation_layer
from mmengine.registry import MODELS

from ...compat import forward_ad_active, is_tracing
from .recompute import can_fuse_residual, norm_act, residual_act

__all__ = ['ActBlockMixin', 'build_attention']


def build_attention(cfg: Optional[dict],
                    in_channels: int) -> Optional[nn.Module]:
    """Build an attention layer for a block output of ``in_channels``.

    Args:
        cfg (dict, optional): Layer config; ``in_channels`` is filled in.
        in_channels (int): Channels of the tensor the layer rescales.

    Returns:
        nn.Module or None: The layer, None when ``cfg`` is None.
    """
    if cfg is None:
        return None
    cfg = dict(cfg)
    given = cfg.pop('in_channels', None)
    if given is not None and given != in_channels:
        raise ValueError(f'attention_cfg sets in_channels={given} but the '
                         f'block output it rescales has {in_channels} '
                         'channels; drop in_channels from attention_cfg')
    return MODELS.build(dict(cfg, in_channels=in_channels))


def _norm_then_act(norm: nn.Module, act: nn.Module,
                   x: torch.Tensor) -> torch.Tensor:
    return act(norm(x))


class ActBlockMixin:
    """One activation per position and an attention before the add.

    Put it before an upstream block class; every keyword argument it does not
    name goes to that class.

    Args:
        act_cfg (dict): Activation config; each position builds its own.
        attention_cfg (dict, optional): Attention on the residual branch,
            after the last norm (and mmdet's plugins after the last
            convolution), before the add.
        recompute_act (bool): Rebuild activation inputs in backward instead
            of saving them (see :mod:`.recompute`). Defaults to False.
    """

    def __init__(self,
                 *args,
                 act_cfg: dict = dict(type='ReLU', inplace=True),
                 attention_cfg: Optional[dict] = None,
                 recompute_act: bool = False,
                 **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # Upstream calls one `relu` at every position; one module per
        # position keeps learnable activations untied.
        del self.relu
        self.num_positions = 3 if hasattr(self, 'conv3') else 2
        for i in range(1, self.num_positions + 1):
            setattr(self, f'act{i}', build_activation_layer(act_cfg))
        last_conv = getattr(self, f'conv{self.num_positions}')
        self.attn = build_attention(attention_cfg, last_conv.out_channels)
        self.recompute_act = recompute_act

    def _positions(self) -> List[Tuple[nn.Module, nn.Module, nn.Module]]:
        return [(getattr(self, f'conv{i}'), getattr(self, f'norm{i}'),
                 getattr(self, f'act{i}'))
                for i in range(1, self.num_positions + 1)]

    def _plugin_names(self, position: int) -> List[str]:
        """mmdet's plugins after convolution ``position`` (mmpretrain's
        blocks have none)."""
        if not getattr(self, 'with_plugins', False):
            return []
        return getattr(self, f'after_conv{position}_plugin_names')

    def _plugins(self, position: int, x: torch.Tensor) -> torch.Tensor:
        names = self._plugin_names(position)
        return self.forward_plugin(x, names) if names else x

    def _branch(self, x: torch.Tensor, step: Callable) -> torch.Tensor:
        """Every position but the last (``step(norm, act, conv_out)``), then
        the last convolution."""
        *head, (conv, _, _) = self._positions()
        out = x
        for i, (conv_i, norm_i, act_i) in enumerate(head, 1):
            out = self._plugins(i, step(norm_i, act_i, conv_i(out)))
        return conv(out)

    def _tail(self, normed: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Plugins, attention, drop path and the shortcut add (the block's
        tail, written once; :func:`residual_act` fuses it with the last
        activation)."""
        out = self._plugins(self.num_positions, normed)
        if self.attn is not None:
            out = self.attn(out)
        identity = x if self.downsample is None else self.downsample(x)
        drop_path = getattr(self, 'drop_path', None)  # mmpretrain only
        if drop_path is not None:
            out = drop_path(out)
        # In-place like upstream: neither BN nor x * gate needs its own
        # output for backward (autograd's version check guards the rest).
        out += identity
        return out

    def _use_recompute(self) -> bool:
        # Only worth it when backward will run; with_cp already recomputes
        # all. Traced (torch.compile): the compiler's partitioner decides
        # what to keep, and torch 2.1's dynamo cannot pass a module into the
        # Function. Forward-mode AD: the plain ops carry the tangents (the
        # Function has no jvp).
        return (self.recompute_act and torch.is_grad_enabled()
                and not self.with_cp and not is_tracing()
                and not forward_ad_active())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Forward one block."""
        _, norm, act = self._positions()[-1]
        if self._use_recompute():
            conv_out = self._branch(x, norm_act)
            if (not self._plugin_names(self.num_positions)
                    and can_fuse_residual(self)):
                return residual_act(self, act, norm, conv_out, x)
            return act(self._tail(norm(conv_out), x))

        def _inner_forward(x):
            return self._tail(norm(self._branch(x, _norm_then_act)), x)

        # upstream's checkpointing rule
        if self.with_cp and x.requires_grad:
            return act(cp.checkpoint(_inner_forward, x, use_reentrant=False))
        return act(_inner_forward(x))
