from .cbam import APACBAMAttention, CBAMAttention
from .channel_attention import APASELayer, SEAttention
from .normed_conv import LearnableNormedConv2d

__all__ = [
    'APASELayer', 'SEAttention', 'APACBAMAttention', 'CBAMAttention',
    'LearnableNormedConv2d'
]
