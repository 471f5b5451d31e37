from .activation_constructor import ActivationOptimWrapperConstructor
from .cpu_amp_optim_wrapper import CPUAmpOptimWrapper

__all__ = ['ActivationOptimWrapperConstructor', 'CPUAmpOptimWrapper']
