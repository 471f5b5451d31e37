from .channel_attention import APASELayer, SEAttention

__all__ = ['APASELayer', 'SEAttention']
