from .activation_stats import ActivationStatsHook
from .gol_frequency import GOLFrequencyHook

__all__ = ['ActivationStatsHook', 'GOLFrequencyHook']
