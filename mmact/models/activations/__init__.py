from .apa import AGLU, APA
from .arelu import AReLU
from .iglu import IGLU, IGLUApprox

__all__ = ['APA', 'AGLU', 'AReLU', 'IGLU', 'IGLUApprox']
