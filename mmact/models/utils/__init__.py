from .swap import (known_shared_activations, swap_activations,
                   untie_activations)

__all__ = ['known_shared_activations', 'swap_activations', 'untie_activations']
