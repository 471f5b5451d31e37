"""mmcv's CARAFE upsampler on every device.

mmcv's ``CARAFEPack`` (registered as ``'carafe'``) has a CUDA kernel only:
on the CPU it fails with ``carafe_forward_impl: implementation for device
cpu not found``. :class:`CARAFEUpsample` is that module (same arguments,
parameters, initialisation and state-dict keys) whose reassembly runs
:func:`mmact.ops.carafe.carafe`: mmcv's kernel on CUDA, torch elsewhere.

The module imports ``mmcv.ops`` (compiled); it is imported when mmdet's
``MODELS`` first looks a name up (:mod:`mmact.registry`), not with
``import mmact``.
"""
from mmdet.registry import MODELS
from torch import Tensor

from mmact.models.mmdet_support import importing_mmdet_models
from mmact.ops.carafe import carafe

# Where mmcv's compiled ops do not load, the error names CARAFEUpsample and
# how to get them (mmact.models.mmdet_support).
with importing_mmdet_models(__name__):
    from mmcv.ops.carafe import CARAFEPack

__all__ = ['CARAFEUpsample']


@MODELS.register_module()
class CARAFEUpsample(CARAFEPack):
    """CARAFE upsampling (Wang et al., 2019) on every device.

    Args:
        channels (int): Input feature channels.
        scale_factor (int): Upsampling ratio.
        up_kernel (int): Reassembly kernel size. Defaults to 5.
        up_group (int): Groups of channels sharing a kernel. Defaults to 1.
        encoder_kernel (int): Kernel size of the content encoder. Defaults
            to 3.
        encoder_dilation (int): Dilation of the content encoder. Defaults
            to 1.
        compressed_channels (int): Output channels of the channel
            compressor. Defaults to 64.
    """

    def feature_reassemble(self, x: Tensor, mask: Tensor) -> Tensor:
        return carafe(x, mask, self.up_kernel, self.up_group,
                      self.scale_factor)
