"""IGLU and IGLU-APPROX modules (Kang et al., IGLU; math in
:mod:`mmact.ops.iglu`)."""
from typing import Dict, Optional

import torch
import torch.nn as nn
from mmengine.model import BaseModule
from mmengine.registry import MODELS
from torch import Tensor

from mmact.ops import iglu, iglu_approx

from .base import LearnableActivation

__all__ = ['IGLU', 'IGLUApprox']


class _IGLUBase(LearnableActivation, BaseModule):

    # only a parameter with learnable_sigma=True; a fixed sigma is a buffer
    no_decay_params = ('sigma', )

    def __init__(self,
                 sigma: float = 1.0,
                 learnable_sigma: bool = False,
                 inplace: bool = False,
                 init_cfg: Optional[dict] = None) -> None:
        super().__init__(init_cfg=init_cfg)
        if isinstance(sigma, bool) or not isinstance(sigma, (int, float)):
            raise TypeError(f'sigma must be a float, got {sigma!r}')
        if not sigma > 0:
            raise ValueError(f'sigma must be > 0, got {sigma}')
        self.learnable_sigma = bool(learnable_sigma)
        self.inplace = inplace
        if self.learnable_sigma:
            self.sigma = nn.Parameter(torch.tensor([float(sigma)]))
        else:
            self.register_buffer(
                'sigma', torch.tensor([float(sigma)]), persistent=False)

    def activation_stats(self) -> Dict[str, Tensor]:
        """``sigma`` when it is learned, else nothing."""
        if not self.learnable_sigma:
            return {}
        return {'sigma': self.sigma.detach()}

    def extra_repr(self) -> str:
        return (f'sigma={self.sigma.item():.4g}, '
                f'learnable_sigma={self.learnable_sigma}')


@MODELS.register_module()
class IGLU(_IGLUBase):
    r"""IGLU, a GELU scale mixture with a Cauchy gate (Kang et al., IGLU, Eq.
    8).

    .. math::
        \mathrm{IGLU}(x) = x\left(\tfrac12 + \tfrac{\arctan(\sigma x)}{\pi}
        \right)

    Large ``sigma`` tends to ReLU, small ``sigma`` to ``x / 2``.

    Args:
        sigma (float): Gate sharpness, > 0. Defaults to 1.0.
        learnable_sigma (bool): Make ``sigma`` a learnable parameter.
            Defaults to False (a fixed, non-persistent buffer).
        inplace (bool): Accepted for mmcv's ``ConvModule`` and ignored.
        init_cfg (dict, optional): mmengine initialisation config.
    """

    def forward(self, x: Tensor) -> Tensor:
        """Apply IGLU.

        Args:
            x (Tensor): Floating-point input.

        Returns:
            Tensor: Same shape and dtype as ``x``.
        """
        return iglu(x, self.sigma)


@MODELS.register_module()
class IGLUApprox(_IGLUBase):
    r"""IGLU-APPROX, IGLU with a rational gate (Kang et al., IGLU, Eq. 11).

    .. math::
        \mathrm{IGLU}_{approx}(x) = \frac{x}{2}\,
        \frac{1 + 2\,\mathrm{relu}(\sigma x)}{1 + |\sigma x|}

    Args:
        sigma (float): Gate sharpness, > 0. Defaults to 1.0.
        learnable_sigma (bool): Make ``sigma`` a learnable parameter.
            Defaults to False (a fixed, non-persistent buffer).
        inplace (bool): Accepted for mmcv's ``ConvModule`` and ignored.
        init_cfg (dict, optional): mmengine initialisation config.
    """

    def forward(self, x: Tensor) -> Tensor:
        """Apply IGLU-APPROX.

        Args:
            x (Tensor): Floating-point input.

        Returns:
            Tensor: Same shape and dtype as ``x``.
        """
        return iglu_approx(x, self.sigma)
