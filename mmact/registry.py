"""Where mmact components are registered, and when their modules load.

Registration is by decorator, in the registry of the codebase a component
belongs to:

- mmengine's root ``MODELS`` / ``HOOKS`` / ``METRICS`` / ...: activations,
  attention layers and the hooks, metrics and optimizer parts any codebase
  can use. Child registries (mmdet, mmpretrain, mmseg, ...) search their
  parent, so ``act_cfg=dict(type='AGLU')`` resolves under any default scope.
- ``mmdet.registry`` / ``mmpretrain.registry``: parts built on those
  codebases' classes. A name never resolves in a sibling registry, so the
  backbones are registered in both.

The modules in :data:`UPSTREAM_MODEL_MODULES` subclass mmdet / mmpretrain
models, and importing those codebases' model packages takes seconds.
``import mmact`` therefore adds them to the import locations of their
registries (:func:`import_on_first_lookup`): mmengine imports a registry's
locations the first time it looks a name up (``Registry.get``, hence every
``build``), so a config names ``type='ActResNet'`` as usual and only runs
that use the mmdet / mmpretrain registries import them.

mmdet's model package needs mmcv's compiled ops. mmdet's ``MODELS`` imports
:mod:`mmact.models.mmdet_components` before its own models, so that where
those ops do not load, a build from it raises
:class:`~mmact.models.mmdet_support.MmcvOpsMissingError` (naming mmact's
components there and the install command) and none of them is registered;
:mod:`mmact.models.backbones` needs no mmdet models and serves mmpretrain's
registry either way.
"""
import importlib
from typing import Dict, Tuple

from mmdet.registry import MODELS as MMDET_MODELS
from mmengine.registry import Registry
from mmpretrain.registry import MODELS as MMPRETRAIN_MODELS

__all__ = [
    'UPSTREAM_MODEL_MODULES', 'FIRST_LOCATIONS', 'import_on_first_lookup',
    'registered_components'
]

#: mmact module -> the registries its decorators register into.
UPSTREAM_MODEL_MODULES: Dict[str, Tuple[Registry, ...]] = {
    'mmact.models.mmdet_components': (MMDET_MODELS, ),
    'mmact.models.backbones': (MMDET_MODELS, MMPRETRAIN_MODELS),
    'mmact.models.heads': (MMPRETRAIN_MODELS, ),
}

#: Modules of :data:`UPSTREAM_MODEL_MODULES` imported before their
#: registries' own locations.
FIRST_LOCATIONS = ('mmact.models.mmdet_components', )


def import_on_first_lookup(module: str,
                           *registries: Registry,
                           first: bool = False) -> None:
    """Import ``module`` when one of ``registries`` first looks a name up.

    Uses mmengine's import locations of a registry (the ``locations``
    argument of ``Registry``, imported in order by
    ``Registry.import_from_location`` on the first ``get``). A registry that
    has looked names up already will not import its locations again, so then
    ``module`` is imported now.

    Args:
        module (str): Module whose decorators register into ``registries``.
        *registries (Registry): The registries (children of mmengine's root
            registries, which have import locations).
        first (bool): Import ``module`` before the registries' other
            locations, so that its error, if it raises one, is the one a
            build sees. Defaults to False (after them).
    """
    if any(registry._imported for registry in registries):
        importlib.import_module(module)
        return
    for registry in registries:
        if module not in registry._locations:
            # A new list: mmengine's default ``locations=[]`` is one list
            # object shared by every registry created without locations.
            registry._locations = ([module, *registry._locations] if first else
                                   [*registry._locations, module])


def registered_components() -> Dict[str, type]:
    """Every public class or function mmact registers, by import path.

    Imports every package of mmact that registers (all but ``ops``,
    ``analysis`` and ``testing``) and the modules of
    :data:`UPSTREAM_MODEL_MODULES` first, so that the answer does not depend
    on what was imported before; then reads mmengine's root registries and
    mmdet's and mmpretrain's. Private builders (``_name``) are left out.

    Returns:
        dict: ``'mmact.models.activations.apa.AGLU'`` -> the object, for
        every registered object defined in mmact (aliases once).
    """
    import os.path as osp
    import pkgutil

    import mmdet.registry
    import mmengine.registry
    import mmpretrain.registry
    for info in pkgutil.walk_packages([osp.dirname(__file__)], 'mmact.'):
        if info.ispkg and info.name.split('.')[1] not in ('ops', 'analysis',
                                                          'testing'):
            importlib.import_module(info.name)
    for module in UPSTREAM_MODEL_MODULES:
        importlib.import_module(module)
    found: Dict[str, type] = {}
    for package in (mmengine.registry, mmdet.registry, mmpretrain.registry):
        for registry in vars(package).values():
            if not isinstance(registry, Registry):
                continue
            for obj in registry.module_dict.values():
                if obj.__module__.split('.')[0] == 'mmact' and \
                        not obj.__name__.startswith('_'):
                    found[f'{obj.__module__}.{obj.__qualname__}'] = obj
    return dict(sorted(found.items()))
