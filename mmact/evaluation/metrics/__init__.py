from .shot_accuracy import ShotAccuracy

__all__ = ['ShotAccuracy']
