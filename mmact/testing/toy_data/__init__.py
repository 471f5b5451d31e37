"""Deterministic generator of small toy datasets in stock OpenMMLab layouts.

No real dataset can be downloaded where this project is tested, so every
test, smoke run and example config that needs data uses a tiny synthetic set
written by :func:`generate_toy_data`. Each format writes a dataset root whose
directory layout and annotation file names are those the stock mmdet /
mmpretrain configs expect, so a config only has to swap ``data_root``:

===============  =============================================================
format           layout under the returned root
===============  =============================================================
``coco``         ``annotations/instances_{train,val}2017.json``,
                 ``{train,val}2017/<12-digit id>.jpg``
``lvis`` (v1)    ``annotations/lvis_v1_{train,val}.json``,
                 ``{train,val}2017/<12-digit id>.jpg`` (file names derived
                 from ``coco_url`` as ``LVISV1Dataset`` does); long-tailed
                 training split with rare / common / frequent categories
``v3det``        ``annotations/v3det_2023_v1_{train,val}.json``,
                 ``annotations/category_name_13204_v3det_2023_v1.txt``,
                 ``images/{train,val}/<12-digit id>.jpg``
``objects365``   ``annotations/zhiyuan_objv2_{train,val}.json``,
                 ``{train,val}/patch0/objects365_v2_<8-digit id>.jpg``
``cls``          ``meta/{train,val}.txt``, ``meta/classes.txt``,
                 ``train/class_<k>/<k>_<i>.jpg``, ``val/val_<i>.jpg``
===============  =============================================================

Modules: :mod:`.formats` (the table of formats and the writer),
:mod:`.render` (shapes, images, files), :mod:`.labels` (which categories
each image shows), :mod:`.classes` (stock class names and ids).

Example:
    >>> root = generate_toy_data('lvis', 'data/toy_lvis', num_train=12)
    >>> missing_files(root, 'lvis', num_train=12)
    []
"""
from .classes import COCO_CATEGORY_IDS, V3DET_TOY_CLASSES, toy_classes
from .formats import (FORMATS, MANIFEST, TOY_FORMATS, ToyFormat,
                      generate_toy_data, missing_files, resolve_options)
from .labels import lvis_frequency, lvis_frequency_thresholds
from .render import SHAPE_KINDS, category_appearance

__all__ = [
    'generate_toy_data', 'missing_files', 'resolve_options', 'FORMATS',
    'TOY_FORMATS', 'MANIFEST', 'ToyFormat', 'toy_classes', 'lvis_frequency',
    'lvis_frequency_thresholds', 'category_appearance', 'COCO_CATEGORY_IDS',
    'V3DET_TOY_CLASSES', 'SHAPE_KINDS'
]
