from .metrics import ShotAccuracy

__all__ = ['ShotAccuracy']
