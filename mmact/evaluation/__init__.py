from .metrics import ShotAccuracy, class_counts_from_ann_file, shot_groups

__all__ = ['ShotAccuracy', 'class_counts_from_ann_file', 'shot_groups']
