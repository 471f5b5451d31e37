from .class_counts import (SHOT_GROUPS, ClassImageCounts,
                           class_counts_from_ann_file,
                           image_counts_from_annotations,
                           image_counts_from_dataset, image_counts_from_labels,
                           long_tailed_counts, shot_groups, unwrap_datasets)

__all__ = [
    'ClassImageCounts', 'SHOT_GROUPS', 'unwrap_datasets',
    'image_counts_from_labels', 'image_counts_from_annotations',
    'image_counts_from_dataset', 'class_counts_from_ann_file', 'shot_groups',
    'long_tailed_counts'
]
