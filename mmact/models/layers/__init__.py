from .channel_attention import APASELayer, SEAttention
from .normed_conv import LearnableNormedConv2d

__all__ = ['APASELayer', 'SEAttention', 'LearnableNormedConv2d']
