from .apa import AGLU, APA
from .arelu import AReLU
from .fles import FleS, materialize_lazy_modules
from .iglu import IGLU, IGLUApprox

__all__ = ['APA', 'AGLU', 'AReLU', 'IGLU', 'IGLUApprox', 'FleS',
           'materialize_lazy_modules']
