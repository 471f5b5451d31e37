"""Loading checkpoints that cannot run code.

A torch checkpoint is a pickle, and unpickling can run any code the file
names. mmact reads checkpoints through one allow-list
(:mod:`~mmact.checkpoint.allow_list`) on every supported torch, and reads
and writes ``.safetensors`` weights. See docs/user_guides/safe_loading.md.
"""
from .allow_list import RefusedGlobal, allowed_globals
from .loading import (TRUST_FLAG, CheckpointLoadError, UnsafeCheckpointError,
                      add_trust_argument, safe_checkpoint_loading, safe_load)
from .safetensors_io import (is_safetensors, load_safetensors,
                             load_safetensors_metadata, save_safetensors)

__all__ = [
    'RefusedGlobal', 'allowed_globals', 'TRUST_FLAG', 'CheckpointLoadError',
    'UnsafeCheckpointError', 'add_trust_argument', 'safe_checkpoint_loading',
    'safe_load', 'is_safetensors', 'load_safetensors',
    'load_safetensors_metadata', 'save_safetensors'
]
