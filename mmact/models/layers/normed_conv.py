"""Cosine (normalised) convolution whose scale is learned.

mmdet's ``NormedConv2d`` multiplies the cosine logits by a fixed temperature
(20 in its LVIS configs). The APA paper's LVIS recipe (Alexandridis et al.,
Adaptive Parametric Activation, 2024, Table XV: "Norm. Mask scale:
learnable") learns it instead. Following the authors' released code, the
layer learns a root ``t`` and uses ``scale = t ** 2`` (positive whatever the
sign of ``t``), with ``t = 4.5`` at initialisation, i.e. ``scale = 20.25``.

The layer is registered in mmengine's root ``MODELS``; mmdet's
``FCNMaskHead`` builds ``predictor_cfg`` with ``mmcv.cnn.build_conv_layer``,
which looks the type up in the current scope's registry and then in the
root, so ``predictor_cfg=dict(type='LearnableNormedConv2d')`` works in any
mmdet mask head.
"""
import math

import torch
import torch.nn as nn
from mmengine.registry import MODELS

__all__ = ['LearnableNormedConv2d']


@MODELS.register_module()
class LearnableNormedConv2d(nn.Conv2d):
    """``scale * conv(x / |x|, w / |w|) + bias`` with ``scale = t ** 2``.

    ``|x|`` is the L2 norm over the input channels at each position and
    ``|w|`` the L2 norm of each filter over its input channels at each kernel
    position (mmdet ``NormedConv2d``'s default normalisation; for the 1x1
    mask predictor both are plain cosine similarities).

    Args:
        *args: ``nn.Conv2d`` arguments (``in_channels``, ``out_channels``,
            ``kernel_size``, ...).
        scale_root_init (float): Initial ``t``; the initial scale is its
            square. Defaults to 4.5 (scale 20.25, the authors' code).
        eps (float): Added to both norms so zero vectors stay finite.
            Defaults to 1e-6 (as mmdet's ``NormedConv2d``).
        **kwargs: ``nn.Conv2d`` keyword arguments.

    Example:
        >>> conv = LearnableNormedConv2d(256, 80, 1)
        >>> conv.scale.item()
        20.25
    """

    def __init__(self,
                 *args,
                 scale_root_init: float = 4.5,
                 eps: float = 1e-6,
                 **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if not (isinstance(scale_root_init, (int, float))
                and math.isfinite(scale_root_init) and scale_root_init != 0):
            raise ValueError('LearnableNormedConv2d: scale_root_init must be '
                             'a finite non-zero number, got '
                             f'{scale_root_init!r}')
        if not (isinstance(eps, (int, float)) and eps > 0):
            raise ValueError('LearnableNormedConv2d: eps must be a positive '
                             f'number, got {eps!r}')
        self.scale_root_init = float(scale_root_init)
        self.eps = float(eps)
        # Shape (1,) as in the authors' code (their name: ``tempearture``).
        self.scale_root = nn.Parameter(torch.full((1, ), self.scale_root_init))

    @property
    def scale(self) -> torch.Tensor:
        """The current scale ``t ** 2`` (shape (1,))."""
        return self.scale_root.square()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Scaled cosine logits, shaped as ``nn.Conv2d``'s output."""
        weight = self.weight / (
            self.weight.norm(dim=1, keepdim=True) + self.eps)
        x = x / (x.norm(dim=1, keepdim=True) + self.eps)
        return self._conv_forward(x * self.scale, weight, self.bias)

    def extra_repr(self) -> str:
        return (f'{super().extra_repr()}, '
                f'scale_root_init={self.scale_root_init}, eps={self.eps}')
