"""mmact's components built on mmdet's models, all or none.

mmdet's ``MODELS`` imports this module first among its import locations
(:mod:`mmact.registry`), before mmdet's own models: where mmcv's compiled ops
do not load, a config that builds from that registry gets
:class:`~.mmdet_support.MmcvOpsMissingError`, naming mmact's components
there, mmcv's compiled ops and the install command, instead of mmdet's
``No module named 'mmcv._ext'``; and none of them is registered.
"""
import importlib

from .mmdet_support import MMDET_COMPONENTS, require_mmdet_models

__all__ = []

require_mmdet_models()
for _module in MMDET_COMPONENTS:
    importlib.import_module(_module)
