"""Where mmact components are registered (DESIGN §1).

Activations and attention layers go into mmengine's root ``MODELS`` so that
``act_cfg=dict(type='AGLU')`` resolves under any default scope. Backbones and
losses go into the registries of mmdet / mmpretrain, which are optional.
"""
import importlib
import importlib.util
from typing import Callable, Optional

from mmengine.registry import MODELS, Registry

__all__ = ['MODELS', 'optional_models', 'register_unavailable']


def optional_models(package: str) -> Optional[Registry]:
    """Return ``<package>.registry.MODELS``, or None when it is not installed.

    Args:
        package (str): ``'mmdet'`` or ``'mmpretrain'``.
    """
    if importlib.util.find_spec(package) is None:
        return None
    return importlib.import_module(f'{package}.registry').MODELS


def register_unavailable(name: str, requirement: str) -> None:
    """Register ``name`` in the root MODELS as a builder that explains why it
    cannot be built, so a config asking for it fails with the missing package
    instead of "not in the registry".

    Args:
        name (str): Component name a config would use, e.g. ``'ActResNet'``.
        requirement (str): What to install, e.g. ``'mmdet>=3.0 or mmpretrain>=1.0'``.
    """

    def unavailable(*args, **kwargs) -> Callable:
        raise ImportError(f'{name} is part of mmact but needs {requirement}, '
                          f'which is not installed: pip install {requirement}')

    MODELS.register_module(name=name, module=unavailable)
