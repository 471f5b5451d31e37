from .apa import AGLU, APA
from .arelu import AReLU
from .fles import FleS
from .iglu import IGLU, IGLUApprox
from .meta_acon import MetaACON
from .smu import SMU

__all__ = ['APA', 'AGLU', 'AReLU', 'IGLU', 'IGLUApprox', 'FleS', 'SMU',
           'MetaACON']
