"""mmact: learnable activations and activation-based attention for OpenMMLab."""
from .utils.compat import (check_mmcv, patch_lvis_numpy,
                           patch_mmengine_checkpoint_loading)
from .version import __version__, version_info

check_mmcv()
patch_lvis_numpy()
patch_mmengine_checkpoint_loading()

from . import engine, evaluation, models  # noqa: E402  (registers components)

__all__ = ['__version__', 'version_info', 'engine', 'evaluation', 'models']
