from .shot_accuracy import (SHOT_GROUPS, ShotAccuracy,
                            class_counts_from_ann_file, shot_groups)

__all__ = [
    'SHOT_GROUPS', 'ShotAccuracy', 'class_counts_from_ann_file', 'shot_groups'
]
