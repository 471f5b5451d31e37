from .materialize import build_materialized_model, materialize_lazy_modules
from .swap import (known_shared_activations, swap_activations,
                   untie_activations)

__all__ = [
    'build_materialized_model', 'materialize_lazy_modules',
    'known_shared_activations', 'swap_activations', 'untie_activations'
]
