from . import hooks  # noqa: F401
from .model_wrappers import CPUDistributedDataParallel

__all__ = ['hooks', 'CPUDistributedDataParallel']
