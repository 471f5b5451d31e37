"""SMU module (Biswas et al., Smooth Maximum Unit, CVPR 2022; math in
:mod:`mmact.ops.smu`)."""
from typing import Dict, Optional

import torch
import torch.nn as nn
from mmengine.model import BaseModule
from mmengine.registry import MODELS
from torch import Tensor

from mmact.ops.smu import smu

from .base import LearnableActivation

__all__ = ['SMU']


def _real(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f'SMU: {name} must be a float, got {value!r}')
    return float(value)


@MODELS.register_module()
class SMU(LearnableActivation, BaseModule):
    r"""Smooth maximum unit, a smooth ``max(x, alpha x)``.

    .. math::
        \mathrm{SMU}(x) = \tfrac12\left((1 + \alpha) x + (1 - \alpha) x\,
        \mathrm{erf}(\mu (1 - \alpha) x)\right)

    One learnable ``mu`` per layer; ``alpha`` is fixed.

    Args:
        alpha (float): Negative slope of the smoothed maximum, in [0, 1).
            Defaults to 0.25 (paper).
        mu (float): Initial smoothing parameter, > 0. Defaults to 1e6, the
            value of the authors' code: SMU starts as Leaky ReLU with slope
            ``alpha`` and learns how smooth to become.
        learnable_mu (bool): Whether ``mu`` is learnable. Defaults to True.
        inplace (bool): Accepted for mmcv's ``ConvModule`` and ignored.
        init_cfg (dict, optional): mmengine initialisation config.
    """

    # only a parameter with learnable_mu=True; a fixed mu is a buffer
    no_decay_params = ('mu', )

    def __init__(self,
                 alpha: float = 0.25,
                 mu: float = 1e6,
                 learnable_mu: bool = True,
                 inplace: bool = False,
                 init_cfg: Optional[dict] = None) -> None:
        super().__init__(init_cfg=init_cfg)
        alpha = _real(alpha, 'alpha')
        mu = _real(mu, 'mu')
        if not 0.0 <= alpha < 1.0:
            raise ValueError(f'SMU: alpha must be in [0, 1), got {alpha}')
        if not mu > 0:
            raise ValueError(f'SMU: mu must be > 0, got {mu}')
        self.alpha = alpha
        self.inplace = inplace
        self.learnable_mu = bool(learnable_mu)
        value = torch.tensor([mu])
        if self.learnable_mu:
            self.mu = nn.Parameter(value)
        else:
            self.register_buffer('mu', value, persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        """Apply SMU.

        Args:
            x (Tensor): Floating-point input of any shape.

        Returns:
            Tensor: Same shape and dtype as ``x``.
        """
        return smu(x, self.mu, self.alpha)

    def activation_stats(self) -> Dict[str, Tensor]:
        """``mu`` when it is learned, else nothing."""
        if not self.learnable_mu:
            return {}
        return {'mu': self.mu.detach()}

    def extra_repr(self) -> str:
        return (f'alpha={self.alpha}, mu={self.mu.item():.4g}, '
                f'learnable_mu={self.learnable_mu}')
