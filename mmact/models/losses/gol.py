"""Gumbel Optimised Loss (GOL) with drop-loss for long-tailed detection.

Alexandridis et al., Long-tailed Instance Segmentation using Gumbel
Optimized Loss, ECCV 2022. Every class logit ``s`` goes through the Gumbel activation ``p = exp(-exp(-s))`` and is
trained with binary cross-entropy; the negatives of rare classes are dropped
(drop-loss, Hsieh et al. AAAI 2021) so that frequent classes stop suppressing
them.

Channels. As in the GOL reference (its ``DropLoss`` with Gumbel
classification), the classifier has **C channels and no background logit**: a
background RoI is a row whose C binary targets are all 0. For mmdet's
``BBoxHead``, :meth:`GOLLoss.get_activation` returns ``C + 1`` columns — the C
Gumbel probabilities and a zero background column — because
``_predict_by_feat_single`` hands the scores to ``multiclass_nms``, which drops
the last column, and ``refine_bboxes`` / Cascade R-CNN strip it as well.

:class:`GOLLoss` is registered in ``mmdet.registry.MODELS``.
"""
import math
from typing import Dict, Optional, Sequence, Union

import torch
import torch.nn as nn
from mmdet.registry import MODELS
from torch import Tensor

from mmact.datasets.class_counts import image_counts_from_annotations
from mmact.models.mmdet_support import importing_mmdet_models

# mmdet's models import mmcv's compiled ops (mmact.models.mmdet_support).
with importing_mmdet_models(__name__):
    from mmdet.models.losses.utils import weight_reduce_loss

__all__ = ['GOLLoss', 'gumbel_activation', 'gumbel_binary_cross_entropy']

# Above this logit the negative term uses its asymptotic form: with
# x = exp(-s) <= 6e-6 the neglected x**2 / 24 is below 2e-12, and exp(-s)
# would underflow (float32 at s > ~87) long after this point.
_NEG_ASYMPTOTIC_LOGIT = 12.0
# Below this logit p == 0 exactly in float64 (exp(-exp(30)) = 0) and the
# negative term is exactly 0; clamping there keeps exp(-s) finite so that
# autograd never multiplies 0 by inf.
_NEG_ZERO_LOGIT = -30.0
# x = exp(-s) == ln 2 here (see the log1mexp split below).
_LOG1MEXP_SPLIT = -math.log(math.log(2.0))


def gumbel_activation(logits: Tensor) -> Tensor:
    """Gumbel activation ``exp(-exp(-s))`` (the Gumbel CDF).

    Args:
        logits (Tensor): Logits of any shape.

    Returns:
        Tensor: Probabilities in [0, 1], same shape. Saturates to exactly 0
        / 1 without producing NaN for any finite input.
    """
    return torch.exp(-torch.exp(-logits))


def gumbel_binary_cross_entropy(logits: Tensor,
                                targets: Tensor,
                                min_logit: Optional[float] = -4.0) -> Tensor:
    """Element-wise binary cross-entropy of ``p = exp(-exp(-s))``.

    ``-log p = exp(-s)`` and ``-log(1 - p) = -log(-expm1(-exp(-s)))`` (or
    ``-log1p(-p)`` where ``p < 1/2``, the log1mexp split) are
    evaluated directly on the logit, never through ``p`` (which rounds to 0
    or 1). For ``s > 12`` the negative term uses ``s + exp(-s) / 2`` (error
    below 2e-12) so it stays exact where ``exp(-s)`` underflows.

    ``-log p`` grows as ``exp(-s)``: a positive with a very negative logit
    gives huge losses and gradients. Below ``min_logit`` it is continued
    linearly (same value and slope at ``min_logit``), so loss and gradient
    stay bounded but never vanish. The GOL reference instead clamps logits
    to [-4, 10], which zeroes the gradient of positives below -4 and of
    negatives above 10; the default ``min_logit=-4`` keeps the reference's
    loss scale while still pushing such positives up.

    Args:
        logits (Tensor): Logits ``s``.
        targets (Tensor): Targets in [0, 1], broadcastable to ``logits``.
        min_logit (float, optional): Start of the linear continuation of the
            positive term; None for the exact ``exp(-s)`` everywhere (finite
            in float32 for ``s > -88``).

    Returns:
        Tensor: Loss per element, float64 for float64 logits, else float32
        (half-precision logits are promoted: ``exp(-s)`` overflows float16
        already at ``s < -11``).
    """
    s = logits if logits.dtype == torch.float64 else logits.float()
    t = targets.to(s.dtype)
    if min_logit is None:
        pos = torch.exp(-s)
    else:
        # exp(-s) for s >= m, its tangent at m below: C1, slope -exp(-m).
        # torch.where (not clamp) so the kink s == m gets the slope once.
        above = s >= min_logit
        s_above = torch.where(above, s, torch.full_like(s, min_logit))
        pos = torch.where(above, torch.exp(-s_above),
                          math.exp(-min_logit) * (1 + min_logit - s))
    # -log(1 - p) = -log(1 - exp(-x)), x = exp(-s), the log1mexp split:
    # for x < ln 2 (s > -ln ln 2) expm1 keeps 1 - p accurate; above, p is
    # small and log1p(-p) keeps the tiny loss accurate (log(1 - p) would
    # round 1 - p to 1 in float32 and return 0).
    s_mid = s.clamp(min=_NEG_ZERO_LOGIT, max=_NEG_ASYMPTOTIC_LOGIT)
    x = torch.exp(-s_mid)
    neg_exact = torch.where(s_mid > _LOG1MEXP_SPLIT,
                            -torch.log(-torch.expm1(-x)),
                            -torch.log1p(-torch.exp(-x)))
    neg_tail = s + 0.5 * torch.exp(-s.clamp(min=_NEG_ASYMPTOTIC_LOGIT))
    neg = torch.where(s < _NEG_ASYMPTOTIC_LOGIT, neg_exact, neg_tail)
    return t * pos + (1 - t) * neg


@MODELS.register_module()
class GOLLoss(nn.Module):
    """Gumbel Optimised Loss with drop-loss (GOL), for RoI classification.

    For RoI ``i`` with label ``y_i`` (``y_i == C`` is background) and class
    ``j`` the target is ``[j == y_i]``, the loss
    ``w_ij * BCE(exp(-exp(-s_ij)), target)`` summed over classes, times the
    RoI's label weight, averaged over RoIs (``avg_factor``). The drop weight
    ``w_ij`` is 0 for a negative (``j != y_i``) of a rare class ``j`` when

    * ``i`` is a foreground RoI (always), or
    * ``i`` is a background RoI, with probability ``1 - r`` (independently
      per element), ``r`` = share of rare-class labels among the batch's
      valid foreground RoIs. Without foreground RoIs ``r`` is undefined and,
      as in the reference, background negatives are kept.

    A class is rare when its image frequency (share of the training images
    that contain it) is below ``rare_threshold``. The frequencies are never
    built in; they come, in this order of precedence, from
    :meth:`set_class_frequencies` / :meth:`set_class_image_counts` (what
    :class:`mmact.engine.hooks.GOLFrequencyHook` calls before training with
    the runner's training dataset), the ``class_image_counts`` +
    ``num_images`` arguments, or ``freq_file`` (read when the loss is
    built). Without any of them the first loss computation raises a
    RuntimeError: silently dropping nothing would train plain Gumbel BCE.

    Args:
        num_classes (int, optional): Number of foreground classes C; checked
            against the head in :meth:`get_cls_channels`, inferred there
            when None.
        rare_threshold (float): Image-frequency threshold of rare classes
            (0.0011 of the training images, the GOL reference value).
        class_image_counts (Sequence[int], optional): Training image count of
            every class, in label order.
        num_images (int, optional): Number of (annotated) training images,
            required with ``class_image_counts``.
        freq_file (str, optional): COCO/LVIS-format annotation JSON of the
            training set, read here; LVIS ``image_count`` is used when
            present, else images are counted per category. Labels follow the
            order of its ``categories`` list.
        min_logit (float, optional): See :func:`gumbel_binary_cross_entropy`.
        logit_range (tuple[float, float], optional): Clamp the logits to
            this range before the loss, zeroing the gradient outside it, as
            the APA authors' ``DropLoss`` does with (-10, 10) (GitHub
            kostas1515/AGLU, ``mmdetection_v3.2/mmdet/models/losses/
            droploss.py``; their released LVIS detectors were trained with
            it). Needs ``min_logit=None``. Defaults to None (no clamp).
        use_drop_loss (bool): False gives plain Gumbel BCE (no frequencies
            needed), the "Gumbel" ablation.
        reduction (str): ``'mean'``, ``'sum'`` or ``'none'`` (per RoI).
        loss_weight (float): Multiplier of the loss.
        generator (torch.Generator, optional): Random source of the
            background drop (tests, reproducibility). Also settable as the
            ``generator`` attribute.
    """

    def __init__(self,
                 num_classes: Optional[int] = None,
                 rare_threshold: float = 0.0011,
                 class_image_counts: Optional[Sequence[int]] = None,
                 num_images: Optional[int] = None,
                 freq_file: Optional[str] = None,
                 min_logit: Optional[float] = -4.0,
                 logit_range: Optional[Sequence[float]] = None,
                 use_drop_loss: bool = True,
                 reduction: str = 'mean',
                 loss_weight: float = 1.0,
                 generator: Optional[torch.Generator] = None) -> None:
        super().__init__()
        if reduction not in ('mean', 'sum', 'none'):
            raise ValueError(f'unknown reduction {reduction!r}')
        self.num_classes = num_classes
        self.rare_threshold = float(rare_threshold)
        if logit_range is not None:
            if min_logit is not None:
                raise ValueError(
                    'GOLLoss: logit_range clamps the logits where min_logit '
                    'continues the loss linearly; give one of them (set '
                    f'min_logit=None with logit_range={logit_range!r})')
            if len(logit_range) != 2 or not logit_range[0] < logit_range[1]:
                raise ValueError('GOLLoss: logit_range must be (low, high) '
                                 f'with low < high, got {logit_range!r}')
            logit_range = tuple(float(v) for v in logit_range)
        self.logit_range = logit_range
        self.min_logit = min_logit
        self.use_drop_loss = use_drop_loss
        self.reduction = reduction
        self.loss_weight = loss_weight
        self.generator = generator
        # mmdet BBoxHead protocol (see the module docstring)
        self.custom_cls_channels = True
        self.custom_activation = True
        self.custom_accuracy = True
        # Not persistent: frequencies are data facts re-read every run, and
        # keeping them out of state_dict lets checkpoints load both ways.
        self.register_buffer('class_freq', None, persistent=False)
        if class_image_counts is not None:
            if num_images is None:
                raise ValueError('class_image_counts needs num_images')
            self.set_class_image_counts(class_image_counts, num_images)
        elif num_images is not None:
            raise ValueError('num_images given without class_image_counts')
        elif freq_file is not None:
            self.set_class_image_counts(
                *image_counts_from_annotations(freq_file))

    # ------------------------------------------------------------------
    # class frequencies
    @property
    def has_frequency_source(self) -> bool:
        """Whether frequencies came from the config (or were set already)."""
        return self.class_freq is not None

    def set_class_frequencies(
            self, frequencies: Union[Sequence[float], Tensor]) -> None:
        """Set the image frequency of every class (label order).

        Args:
            frequencies (Sequence[float] | Tensor): Share of training images
                containing each class, shape (C,).
        """
        freq = torch.as_tensor(frequencies, dtype=torch.float32).flatten()
        if freq.numel() == 0 or bool((freq < 0).any()):
            raise ValueError('class frequencies must be a non-empty list of '
                             'non-negative numbers')
        if self.num_classes is not None and freq.numel() != self.num_classes:
            raise ValueError(f'{freq.numel()} class frequencies for '
                             f'num_classes={self.num_classes}')
        self.class_freq = freq

    def set_class_image_counts(self, counts: Sequence[int],
                               num_images: int) -> None:
        """Set frequencies as ``counts / num_images``.

        Args:
            counts (Sequence[int]): Training image count of every class.
            num_images (int): Number of annotated training images.
        """
        if num_images <= 0:
            raise ValueError(f'num_images must be positive, got {num_images}')
        self.set_class_frequencies(
            torch.as_tensor(counts, dtype=torch.float64) / float(num_images))

    def rare_classes(self) -> Tensor:
        """Boolean mask (C,) of the rare classes.

        Returns:
            Tensor: ``class_freq < rare_threshold``.
        """
        self._ensure_frequencies()
        return self.class_freq < self.rare_threshold

    def _ensure_frequencies(self) -> None:
        if self.class_freq is not None:
            return
        raise RuntimeError(
            'GOLLoss has no class frequencies, so its drop-loss cannot tell '
            'rare classes. Add custom_hooks=[dict(type="GOLFrequencyHook")] '
            '(reads them from the training dataset), or set freq_file=<train '
            'annotation json> or class_image_counts=[...] + num_images=N in '
            'loss_cls, or use_drop_loss=False for plain Gumbel BCE.')

    # ------------------------------------------------------------------
    # mmdet custom classifier protocol
    def get_cls_channels(self, num_classes: int) -> int:
        """Classifier output channels: C (no background logit).

        Args:
            num_classes (int): Foreground classes of the head.

        Returns:
            int: ``num_classes``.
        """
        if self.num_classes is None:
            self.num_classes = num_classes
        elif self.num_classes != num_classes:
            raise ValueError(f'GOLLoss(num_classes={self.num_classes}) in a '
                             f'head with num_classes={num_classes}')
        if self.class_freq is not None and \
                self.class_freq.numel() != num_classes:
            raise ValueError(f'{self.class_freq.numel()} class frequencies '
                             f'for a head with {num_classes} classes')
        return num_classes

    def get_activation(self, cls_score: Tensor) -> Tensor:
        """Detection scores: Gumbel probabilities plus a background column.

        Args:
            cls_score (Tensor): Logits (N, C).

        Returns:
            Tensor: (N, C + 1): ``exp(-exp(-s))`` and a last column of zeros
            (mmdet's ``multiclass_nms`` and ``refine_bboxes`` drop it).
        """
        scores = gumbel_activation(cls_score)
        return torch.cat([scores, scores.new_zeros(scores.size(0), 1)], dim=1)

    def get_accuracy(self, cls_score: Tensor,
                     labels: Tensor) -> Dict[str, Tensor]:
        """Top-1 accuracy (percent) over the foreground RoIs.

        Background RoIs have no logit to win, so they are not scored.

        Args:
            cls_score (Tensor): Logits (N, C).
            labels (Tensor): Labels (N,), ``C`` for background.

        Returns:
            dict[str, Tensor]: ``{'acc_classes': ...}``.
        """
        pos = (labels >= 0) & (labels < cls_score.size(1))
        if not bool(pos.any()):
            return dict(acc_classes=cls_score.new_tensor(0.))
        correct = cls_score[pos].argmax(dim=1) == labels[pos]
        return dict(acc_classes=correct.float().mean() * 100)

    # ------------------------------------------------------------------
    def drop_weights(self,
                     labels: Tensor,
                     num_classes: int,
                     valid: Optional[Tensor] = None) -> Tensor:
        """Drop-loss weights (N, C): 0 for dropped negatives, else 1.

        Args:
            labels (Tensor): Labels (N,), ``num_classes`` for background.
            num_classes (int): C.
            valid (Tensor, optional): Bool (N,) of RoIs that count for the
                rare share ``r`` (label weight > 0).

        Returns:
            Tensor: Float weights on ``labels.device``.
        """
        rare = self.rare_classes().to(labels.device)
        if rare.numel() != num_classes:
            raise ValueError(f'{rare.numel()} class frequencies for '
                             f'{num_classes} classifier channels')
        fg = (labels >= 0) & (labels < num_classes)
        fg_valid = fg if valid is None else fg & valid
        negative = torch.ones(
            labels.size(0),
            num_classes,
            dtype=torch.bool,
            device=labels.device)
        negative[fg.nonzero(as_tuple=True)[0], labels[fg]] = False
        drop = negative & rare.unsqueeze(0)
        if bool(fg_valid.any()):
            r = rare[labels[fg_valid]].float().mean()
            gen = self.generator
            if gen is None:  # dynamo cannot trace rand(shape, generator=)
                u = torch.rand_like(drop, dtype=torch.float32)
            else:
                u = torch.rand(drop.shape, generator=gen, device=gen.device)
            # u ~ U[0, 1): P(u >= r) = 1 - r, exactly 0 / 1 at r = 1 / 0
            drop_bg = u.to(labels.device) >= r
        else:
            drop_bg = torch.zeros_like(drop)
        drop = drop & (fg.unsqueeze(1) | drop_bg)
        return (~drop).float()

    def forward(self,
                cls_score: Tensor,
                label: Tensor,
                weight: Optional[Tensor] = None,
                avg_factor: Optional[float] = None,
                reduction_override: Optional[str] = None,
                **kwargs) -> Tensor:
        """Compute the loss.

        Args:
            cls_score (Tensor): Logits (N, C).
            label (Tensor): Labels (N,) in [0, C], C = background.
            weight (Tensor, optional): Per-RoI label weights (N,).
            avg_factor (float, optional): Divisor of the summed loss for
                ``'mean'`` (mmdet passes the number of RoIs with weight > 0).
            reduction_override (str, optional): Overrides ``reduction``.

        Returns:
            Tensor: Scalar loss, or (N,) per-RoI losses for ``'none'``.
        """
        reduction = reduction_override or self.reduction
        if reduction not in ('mean', 'sum', 'none'):
            raise ValueError(f'unknown reduction {reduction!r}')
        n, c = cls_score.shape
        fg = (label >= 0) & (label < c)
        target = torch.zeros(n, c, device=cls_score.device)
        target[fg.nonzero(as_tuple=True)[0], label[fg]] = 1.0
        if self.logit_range is not None:
            cls_score = cls_score.clamp(*self.logit_range)
        loss = gumbel_binary_cross_entropy(
            cls_score, target, min_logit=self.min_logit)
        if self.use_drop_loss:
            valid = None if weight is None else weight > 0
            loss = loss * self.drop_weights(label, c, valid).to(loss.dtype)
        loss = weight_reduce_loss(
            loss.sum(dim=1),
            weight=None if weight is None else weight.to(loss.dtype),
            reduction=reduction,
            # mmdet passes avg_factor with every reduction; it only divides
            # the mean (mmdet's reduction refuses it with 'sum').
            avg_factor=avg_factor if reduction == 'mean' else None)
        # float32 even under fp16 autocast (float64 stays float64)
        return self.loss_weight * loss
