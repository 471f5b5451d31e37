from .activation_stats import ActivationStatsHook
from .checkpoint_keys import (CheckpointKeysHook, CheckpointMismatchError,
                              checkpoint_mismatch)
from .exact_resume import ExactResumeHook
from .gol_frequency import GOLFrequencyHook

__all__ = [
    'ActivationStatsHook', 'CheckpointKeysHook', 'CheckpointMismatchError',
    'checkpoint_mismatch', 'ExactResumeHook', 'GOLFrequencyHook'
]
