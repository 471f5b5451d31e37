"""Test helpers: deterministic toy datasets in stock OpenMMLab layouts.

Not imported by ``import mmact``; import ``mmact.testing`` explicitly.
"""
from .config_adapt import adapt_config, config_data_kind, drop_pretrained
from .file_server import TRUNCATED, serve_files
from .narrow_model import narrow_fpn_detector, narrowing_options
from .processes import child_processes, free_port, is_alive
from .tiny_runner import tiny_runner
from .toy_data import (COCO_CATEGORY_IDS, FORMATS, MANIFEST, SHAPE_KINDS,
                       TOY_FORMATS, V3DET_TOY_CLASSES, ToyFormat,
                       category_appearance, generate_toy_data, lvis_frequency,
                       lvis_frequency_thresholds, missing_files,
                       resolve_options, toy_classes)

__all__ = [
    'generate_toy_data', 'missing_files', 'resolve_options', 'FORMATS',
    'TOY_FORMATS', 'MANIFEST', 'ToyFormat', 'toy_classes', 'lvis_frequency',
    'lvis_frequency_thresholds', 'category_appearance', 'COCO_CATEGORY_IDS',
    'V3DET_TOY_CLASSES', 'SHAPE_KINDS', 'adapt_config', 'config_data_kind',
    'drop_pretrained', 'tiny_runner', 'free_port', 'child_processes',
    'is_alive', 'serve_files', 'TRUNCATED', 'narrow_fpn_detector',
    'narrowing_options'
]
