from .swap_fit import (DEFAULT_TOLERANCE, InputMoments, MatchRecord,
                    defer_match, input_moments, match_activations)
from .materialize import build_materialized_model, materialize_lazy_modules
from .swap import (known_shared_activations, replace_activations,
                   swap_activations, untie_activations)

__all__ = [
    'build_materialized_model', 'materialize_lazy_modules',
    'known_shared_activations', 'swap_activations', 'replace_activations',
    'untie_activations', 'DEFAULT_TOLERANCE', 'InputMoments', 'MatchRecord',
    'defer_match', 'input_moments', 'match_activations'
]
