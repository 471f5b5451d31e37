"""mmdet's FCN mask head with CARAFE upsampling on every device."""
from typing import Any

from mmdet.registry import MODELS

from mmact.models.mmdet_support import importing_mmdet_models

# mmdet's models and CARAFE import mmcv's compiled ops
# (mmact.models.mmdet_support).
with importing_mmdet_models(__name__):
    from mmdet.models.roi_heads.mask_heads import FCNMaskHead

    from mmact.models.layers.carafe import CARAFEUpsample

__all__ = ['CARAFEMaskHead']


@MODELS.register_module()
class CARAFEMaskHead(FCNMaskHead):
    """``FCNMaskHead`` with ``upsample_cfg=dict(type='carafe', ...)`` whose
    upsampler is :class:`CARAFEUpsample`.

    mmdet's head accepts only its own upsampler names and builds mmcv's
    ``CARAFEPack`` for ``'carafe'``, which has no CPU kernel. This head
    takes the same arguments and has the same state-dict keys, so configs
    and checkpoints of ``FCNMaskHead`` with CARAFE (e.g. the APA authors'
    LVIS Mask R-CNN R50, GitHub kostas1515/AGLU,
    ``mmdetection_v3.2/configs/activations/
    mask_rcnn_r50_fpn_8x2_sample1e-3_mstrain_lvis_2x.py``) work unchanged on
    the CPU as well.

    Args:
        upsample_cfg (dict): ``type='carafe'``, ``scale_factor`` and
            ``CARAFEPack``'s arguments (``up_kernel``, ``up_group``,
            ``encoder_kernel``, ``encoder_dilation``,
            ``compressed_channels``).
        **kwargs: ``FCNMaskHead``'s other arguments.
    """

    def __init__(self, upsample_cfg: dict, **kwargs: Any) -> None:
        if upsample_cfg.get('type') != 'carafe':
            raise ValueError("CARAFEMaskHead: upsample_cfg.type must be "
                             f"'carafe', got {upsample_cfg.get('type')!r}")
        super().__init__(upsample_cfg=upsample_cfg, **kwargs)
        # the same arguments FCNMaskHead gave mmcv's CARAFEPack
        carafe_args = {
            key: value
            for key, value in self.upsample_cfg.items() if key != 'type'
        }
        self.upsample = CARAFEUpsample(
            channels=self.upsample.channels,
            scale_factor=self.scale_factor,
            **carafe_args)
