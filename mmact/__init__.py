"""mmact: learnable activations and activation-based attention for OpenMMLab.

``import mmact`` (or ``custom_imports=dict(imports=['mmact'])``) registers
mmact's components; the ones built on mmdet / mmpretrain models load when
those registries are first used (see :mod:`mmact.registry`).
"""
# First, so that a torch below the supported range is refused before
# anything fails obscurely on it.
from . import compat  # isort: skip  # noqa: F401
from . import datasets, engine, evaluation, models  # noqa: F401 (registers)
from .registry import (FIRST_LOCATIONS, UPSTREAM_MODEL_MODULES,
                       import_on_first_lookup)
from .compat import allow_mmengine_checkpoint_globals, patch_lvis_numpy
from .version import __version__, version_info

for _module, _registries in UPSTREAM_MODEL_MODULES.items():
    import_on_first_lookup(
        _module, *_registries, first=_module in FIRST_LOCATIONS)
allow_mmengine_checkpoint_globals()
patch_lvis_numpy()

__all__ = [
    '__version__', 'version_info', 'datasets', 'engine', 'evaluation', 'models'
]
