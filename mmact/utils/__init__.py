from .compat import (check_mmcv, patch_lvis_numpy,
                     patch_mmengine_checkpoint_loading)
from .dist import setup_cpu_distributed
from .param_groups import activation_paramwise_cfg
from .swap import swap_activations, untie_activations

__all__ = [
    'check_mmcv', 'patch_lvis_numpy', 'patch_mmengine_checkpoint_loading',
    'setup_cpu_distributed', 'activation_paramwise_cfg', 'swap_activations',
    'untie_activations'
]
