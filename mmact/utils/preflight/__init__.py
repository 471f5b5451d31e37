"""Checks the train/test tools run before a Runner touches a work dir."""
from .checkpoints import (check_checkpoint, check_pretrained_paths,
                          is_remote_checkpoint, missing_pretrained_paths)
from .config import closest_registered, load_config, unknown_type_hint
from .data_content import (DataCheckError, check_datasets, head_num_classes,
                           use_checked_datasets)
from .data_format import (annotation_problems, check_annotation_file,
                          missing_images)
from .data_paths import (DATASETS_GUIDE, check_data_paths, fill_hints,
                         inspect_data_paths, missing_data_paths)
from .resume import (RUN_MARKER, check_fresh_work_dir, checkpoints_in,
                     is_restart_of_recorded_run, record_run, resume_checkpoint)

__all__ = [
    'check_checkpoint', 'check_pretrained_paths', 'is_remote_checkpoint',
    'missing_pretrained_paths', 'closest_registered', 'load_config',
    'unknown_type_hint', 'DATASETS_GUIDE', 'fill_hints', 'check_data_paths',
    'inspect_data_paths', 'missing_data_paths', 'check_fresh_work_dir',
    'checkpoints_in', 'resume_checkpoint', 'RUN_MARKER', 'record_run',
    'is_restart_of_recorded_run', 'DataCheckError', 'check_datasets',
    'head_num_classes', 'use_checked_datasets', 'annotation_problems',
    'check_annotation_file', 'missing_images'
]
