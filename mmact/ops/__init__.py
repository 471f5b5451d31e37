from .apa import aglu, aglu_reference, apa, apa_reference
from .arelu import arelu
from .fles import fles_fused, fles_reference
from .iglu import iglu, iglu_approx
from .meta_acon import acon_c
from .smu import smu

__all__ = [
    'apa', 'aglu', 'apa_reference', 'aglu_reference', 'arelu', 'iglu',
    'iglu_approx', 'fles_fused', 'fles_reference', 'smu', 'acon_c'
]
