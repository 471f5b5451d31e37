"""RoI heads (mmdet ``MODELS``)."""
from .carafe_mask_head import CARAFEMaskHead

__all__ = ['CARAFEMaskHead']
