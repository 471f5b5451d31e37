from .cbam import APACBAMAttention, CBAMAttention
from .channel_attention import APASELayer, SEAttention
from .normed_conv import LearnableNormedConv2d
from .wrapped_cauchy import WrappedCauchyLinear

__all__ = [
    'APASELayer', 'SEAttention', 'APACBAMAttention', 'CBAMAttention',
    'LearnableNormedConv2d', 'WrappedCauchyLinear'
]
