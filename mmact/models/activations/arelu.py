"""AReLU module (Chen et al., AReLU, 2020; math in :mod:`mmact.ops.arelu`)."""
from typing import Dict, Optional

import torch
import torch.nn as nn
from mmengine.model import BaseModule
from mmengine.registry import MODELS
from torch import Tensor

from mmact.ops import arelu

from .base import LearnableActivation

__all__ = ['AReLU']


@MODELS.register_module()
class AReLU(LearnableActivation, BaseModule):
    r"""Attention-based Rectified Linear Unit (Chen et al., AReLU, 2020, Eq.
    7).

    .. math::
        f(x) = \begin{cases} C(\alpha)\,x & x < 0 \\
               (1 + \sigma(\beta))\,x & x \ge 0 \end{cases}

    where ``C`` clamps to [0.01, 0.99]. Two learnable scalars per layer.

    Args:
        alpha (float): Initial negative-side scale. Defaults to 0.90.
        beta (float): Initial positive-side logit. Defaults to 2.0.
        inplace (bool): Accepted for mmcv's ``ConvModule`` and ignored.
        init_cfg (dict, optional): mmengine initialisation config.
    """

    no_decay_params = ('alpha', 'beta')

    def __init__(self,
                 alpha: float = 0.90,
                 beta: float = 2.0,
                 inplace: bool = False,
                 init_cfg: Optional[dict] = None) -> None:
        super().__init__(init_cfg=init_cfg)
        for name, value in (('alpha', alpha), ('beta', beta)):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f'{name} must be a float, got {value!r}')
        self.inplace = inplace
        self.alpha = nn.Parameter(torch.tensor([float(alpha)]))
        self.beta = nn.Parameter(torch.tensor([float(beta)]))

    def forward(self, x: Tensor) -> Tensor:
        """Apply AReLU.

        Args:
            x (Tensor): Floating-point input.

        Returns:
            Tensor: Same shape and dtype as ``x``.
        """
        return arelu(x, self.alpha, self.beta)

    def activation_stats(self) -> Dict[str, Tensor]:
        """``alpha`` (after its clamp to [0.01, 0.99]) and ``beta``."""
        return {
            'alpha': self.alpha.detach().clamp(0.01, 0.99),
            'beta': self.beta.detach()
        }

    def extra_repr(self) -> str:
        return (f'alpha={self.alpha.item():.4g}, '
                f'beta={self.beta.item():.4g}')
