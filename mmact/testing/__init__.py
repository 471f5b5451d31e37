"""Test helpers: deterministic toy datasets in stock OpenMMLab layouts.

Not imported by ``import mmact``; import ``mmact.testing`` explicitly.
"""
from functools import partial

from .config_adapt import adapt_config, config_data_kind, drop_pretrained
from .toy_data import (COCO_CATEGORY_IDS, FORMATS, MANIFEST, SHAPE_KINDS,
                       TOY_FORMATS, V3DET_TOY_CLASSES, ToyFormat,
                       category_appearance, generate_toy_data, lvis_frequency,
                       lvis_frequency_thresholds, missing_files,
                       resolve_options, toy_classes)

# TODO(H11): transitional names, removed once every caller uses
# generate_toy_data(fmt, ...).
generate_coco = partial(generate_toy_data, 'coco')
generate_lvis = partial(generate_toy_data, 'lvis')
generate_v3det = partial(generate_toy_data, 'v3det')
generate_objects365 = partial(generate_toy_data, 'objects365')
generate_classification = partial(generate_toy_data, 'cls')

__all__ = [
    'generate_toy_data', 'missing_files', 'resolve_options', 'FORMATS',
    'TOY_FORMATS', 'MANIFEST', 'ToyFormat', 'toy_classes', 'lvis_frequency',
    'lvis_frequency_thresholds', 'category_appearance', 'COCO_CATEGORY_IDS',
    'V3DET_TOY_CLASSES', 'SHAPE_KINDS', 'adapt_config', 'config_data_kind',
    'drop_pretrained', 'generate_coco', 'generate_lvis', 'generate_v3det',
    'generate_objects365', 'generate_classification'
]
