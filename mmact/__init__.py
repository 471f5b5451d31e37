"""mmact: learnable activations and activation-based attention for OpenMMLab."""
from .utils.compat import (allow_mmengine_checkpoint_globals, check_mmcv,
                           patch_lvis_numpy)
from .version import __version__, version_info

check_mmcv()
patch_lvis_numpy()
allow_mmengine_checkpoint_globals()

from . import engine, evaluation, models  # noqa: E402  (registers components)

__all__ = ['__version__', 'version_info', 'engine', 'evaluation', 'models']
