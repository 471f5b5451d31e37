from . import activations, backbones, heads, layers, losses, utils  # noqa: F401

__all__ = ['activations', 'backbones', 'heads', 'layers', 'losses', 'utils']
