"""Wrapped Cauchy classifier (Han, Wrapped Cauchy Distributed Angular
Softmax for Long-Tailed Visual Recognition, ICML 2023).

Each class ``k`` scores the angle between the feature and its weight with a
wrapped Cauchy density of learned concentration ``gamma_k``:

    logit_k = s * (1 - g^2) / (2 pi (1 + g^2 - 2 g cos_k)),
    g = sigmoid(concentration_logit_k),  cos_k = <x/|x|, w_k/|w_k|> + b_k

The APA authors' V3Det detectors use it as the box classifier (GitHub
kostas1515/AGLU, ``mmdetection_v3.2/mmdet/models/layers/
normed_predictor.py``, ``WCLinear``; configs ``se_*_v3det_2x_wc_*.py``),
with a fixed ``s = 300``. Their code writes ``2 * 3.14`` for ``2 pi``; the
released weights were trained with it, so :data:`TWO_PI_AS_TRAINED` keeps
it (it scales every logit alike, by 1.0005).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.registry import MODELS

__all__ = ['WrappedCauchyLinear', 'TWO_PI_AS_TRAINED']

TWO_PI_AS_TRAINED = 2 * 3.14


@MODELS.register_module(name=['WrappedCauchyLinear', 'WCLinear'])
class WrappedCauchyLinear(nn.Linear):
    """Linear classifier with wrapped Cauchy angular logits.

    Registered as ``WrappedCauchyLinear`` and, for the authors' configs, as
    ``WCLinear`` (their arguments ``s_trainable``, ``learnable_init_value``,
    ``gamma`` are accepted under those names).

    Args:
        in_features (int): Feature size.
        out_features (int): Classes (mmdet: ``num_classes + 1`` for softmax).
        bias (bool): Add a learned bias to the cosine. Defaults to True.
        s_trainable (bool): Learn the scale ``s`` (parameter ``scale``,
            starting at ``learnable_init_value``); otherwise ``s = 300``.
            Defaults to True.
        learnable_init_value (float): Initial learned scale. Defaults to 50.
        gamma (float): Initial ``concentration_logit`` of every class
            (``g = sigmoid(gamma)``). Defaults to 1.0.
        eps (float): Added to the norms. Defaults to 1e-6.
    """

    fixed_scale = 300.0

    def __init__(self,
                 in_features: int,
                 out_features: int,
                 bias: bool = True,
                 s_trainable: bool = True,
                 learnable_init_value: float = 50.0,
                 gamma: float = 1.0,
                 eps: float = 1e-6) -> None:
        if s_trainable and not learnable_init_value > 0:
            raise ValueError('WrappedCauchyLinear: learnable_init_value (the '
                             'initial scale) must be > 0, got '
                             f'{learnable_init_value!r}')
        if not eps > 0:
            raise ValueError(f'WrappedCauchyLinear: eps must be > 0, got '
                             f'{eps!r}')
        super().__init__(in_features, out_features, bias=bias)
        self.eps = eps
        self.concentration_logit = nn.Parameter(
            torch.full((out_features, ), float(gamma)))
        self.scale = nn.Parameter(torch.tensor(
            float(learnable_init_value))) if s_trainable else None
        nn.init.normal_(self.weight, mean=0, std=0.01)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(N, out_features)`` of features ``(N, in_features)``."""
        weight = self.weight / (
            self.weight.norm(dim=1, keepdim=True) + self.eps)
        cosine = F.linear(x / (x.norm(dim=1, keepdim=True) + self.eps),
                          weight, self.bias)
        g = torch.sigmoid(self.concentration_logit)
        density = (1 - g**2) / (
            TWO_PI_AS_TRAINED * (1 + g**2 - 2 * g * cosine))
        scale = self.fixed_scale if self.scale is None else self.scale
        return scale * density
