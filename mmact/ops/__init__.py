from .apa import aglu, aglu_reference, apa, apa_reference
from .arelu import arelu
from .fles import fles_fused, fles_reference
from .iglu import iglu, iglu_approx

__all__ = [
    'apa', 'aglu', 'apa_reference', 'aglu_reference', 'arelu', 'iglu',
    'iglu_approx', 'fles_fused', 'fles_reference'
]
