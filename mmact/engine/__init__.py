from . import hooks, optimizers  # noqa: F401
from .model_wrappers import CPUDistributedDataParallel

__all__ = ['hooks', 'optimizers', 'CPUDistributedDataParallel']
