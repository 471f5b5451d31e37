"""Classification heads (mmpretrain): PC-Softmax for long-tailed test sets.

``PCSoftmaxHead`` is registered in ``mmpretrain.registry.MODELS`` when
mmpretrain is installed; otherwise a config asking for it fails with an
ImportError naming mmpretrain.
"""
from mmact.registry import optional_models, register_unavailable

from .pc_softmax import PostCompensatedSoftmaxMixin, build_pc_softmax_head

__all__ = ['PostCompensatedSoftmaxMixin', 'build_pc_softmax_head']

_MMPRETRAIN = optional_models('mmpretrain')
if _MMPRETRAIN is not None:
    _MMPRETRAIN.register_module(
        name='PCSoftmaxHead', module=build_pc_softmax_head)
else:
    register_unavailable('PCSoftmaxHead', 'mmpretrain>=1.0')
