from .gol_frequency import GOLFrequencyHook

__all__ = ['GOLFrequencyHook']
