from ..compat import (allow_mmengine_checkpoint_globals, check_mmcv,
                      patch_lvis_numpy)
from .dist import (end_with_launcher, finish_run, init_restarted_process_group,
                   is_launcher_main, release_distributed,
                   setup_cpu_distributed)
from .param_groups import activation_paramwise_cfg
from .start_up import StartUp

__all__ = [
    'allow_mmengine_checkpoint_globals', 'check_mmcv', 'patch_lvis_numpy',
    'end_with_launcher', 'finish_run', 'init_restarted_process_group',
    'is_launcher_main', 'release_distributed', 'setup_cpu_distributed',
    'activation_paramwise_cfg', 'StartUp'
]
