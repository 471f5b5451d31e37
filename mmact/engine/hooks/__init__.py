from .activation_stats import ActivationStatsHook
from .checkpoint_keys import (CheckpointKeysHook, CheckpointMismatchError,
                              activation_mismatch, checkpoint_mismatch,
                              describe_activation_mismatch)
from .divergence_guard import DivergenceError, DivergenceGuardHook
from .durable_checkpoint import DurableCheckpointHook, write_durably
from .exact_resume import ExactResumeHook
from .gol_frequency import GOLFrequencyHook
from .main_process_logger import MainProcessLoggerHook
from .preemption import PreemptionHook
from .stock_hooks import replace_stock_hook

__all__ = [
    'ActivationStatsHook', 'CheckpointKeysHook', 'CheckpointMismatchError',
    'checkpoint_mismatch', 'activation_mismatch',
    'describe_activation_mismatch', 'DivergenceError', 'DivergenceGuardHook',
    'DurableCheckpointHook', 'ExactResumeHook', 'GOLFrequencyHook',
    'MainProcessLoggerHook', 'PreemptionHook', 'replace_stock_hook',
    'write_durably'
]
