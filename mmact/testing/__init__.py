"""Test helpers: deterministic toy datasets in stock OpenMMLab layouts.

Not imported by ``import mmact``; import ``mmact.testing`` explicitly.
"""
from .config_adapt import adapt_config, config_data_kind, drop_pretrained
from .toy_data import (COCO_CATEGORY_IDS, SHAPE_KINDS, TOY_FORMATS,
                       V3DET_TOY_CLASSES, category_appearance,
                       generate_classification, generate_coco, generate_lvis,
                       generate_objects365, generate_v3det, lvis_frequency,
                       lvis_frequency_thresholds, toy_classes)

__all__ = [
    'generate_coco', 'generate_lvis', 'generate_v3det', 'generate_objects365',
    'generate_classification', 'toy_classes', 'lvis_frequency',
    'lvis_frequency_thresholds', 'category_appearance', 'COCO_CATEGORY_IDS',
    'V3DET_TOY_CLASSES', 'SHAPE_KINDS', 'TOY_FORMATS', 'adapt_config',
    'config_data_kind', 'drop_pretrained'
]
