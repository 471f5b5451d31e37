from .activation_stats import ActivationStatsHook
from .checkpoint_keys import (CheckpointKeysHook, CheckpointMismatchError,
                              checkpoint_mismatch)
from .exact_resume import ExactResumeHook
from .gol_frequency import GOLFrequencyHook
from .main_process_logger import MainProcessLoggerHook

__all__ = [
    'ActivationStatsHook', 'CheckpointKeysHook', 'CheckpointMismatchError',
    'checkpoint_mismatch', 'ExactResumeHook', 'GOLFrequencyHook',
    'MainProcessLoggerHook'
]
