from . import activations, backbones, layers, losses  # noqa: F401

__all__ = ['activations', 'backbones', 'layers', 'losses']
