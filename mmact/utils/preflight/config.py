"""Load a config and explain the two typos users make most: a config path
and a ``type=`` name."""
import difflib
import os.path as osp
import re
from pathlib import Path
from typing import List, Optional

from mmengine.config import Config
from mmengine.registry import DefaultScope, Registry
from mmengine.registry import root as root_registries

__all__ = ['load_config', 'closest_registered', 'unknown_type_hint']

# mmengine's build functions ("X is not in the mmdet::model registry") and
# the act_cfg / attention_cfg check of mmact's backbones.
_UNKNOWN_TYPE = re.compile(
    r"(?P<name>[\w.]+) is not in the (?:(?P<scope>[\w-]+)::)?"
    r"(?P<registry>[\w ]+?) registry")
_UNKNOWN_LAYER = re.compile(r"type '(?P<name>[\w.]+)' is not registered")


def load_config(path: str, cfg_options: Optional[dict] = None) -> Config:
    """Load a config, naming close matches when the path has a typo.

    Args:
        path (str): Config file path.
        cfg_options (dict, optional): ``--cfg-options`` overrides.

    Raises:
        FileNotFoundError: ``path`` does not exist.
    """
    if not osp.isfile(path):
        folder = Path(path).parent
        candidates = [str(p) for p in folder.glob('*.py')] if folder.is_dir() \
            else []
        close = difflib.get_close_matches(path, candidates, n=3, cutoff=0.6)
        hint = f' Did you mean: {", ".join(close)}?' if close else (
            f' No such folder {str(folder)!r}.' if not folder.is_dir() else '')
        raise FileNotFoundError(f'Config file {path!r} does not exist.{hint}')
    cfg = Config.fromfile(path)
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    return cfg


def _registry(name: str, scope: Optional[str]) -> Optional[Registry]:
    """The registry called ``name`` of ``scope`` (root when not found)."""
    for candidate in vars(root_registries).values():
        if isinstance(candidate, Registry) and candidate.name == name:
            if scope and scope != candidate.scope:
                return candidate._search_child(scope) or candidate
            return candidate
    return None


def closest_registered(name: str, registry: Registry, n: int = 3) -> List[str]:
    """Registered names closest to ``name`` that ``registry`` can build.

    Candidates are the names of ``registry`` and its parents (usable as
    they are) and those of the other scopes under the same root (usable as
    ``scope.Name``).

    Args:
        name (str): The unknown name, optionally ``scope.``-prefixed.
        registry (Registry): The registry the name was looked up in.
        n (int): At most this many names.

    Returns:
        list[str]: Closest first; empty when nothing is close.
    """
    candidates = {}
    node: Optional[Registry] = registry
    while node is not None:
        for key in node.module_dict:
            candidates.setdefault(key, key)
        root, node = node, node.parent
    stack = list(root.children.values())
    while stack:
        child = stack.pop()
        if child is not registry:
            for key in child.module_dict:
                candidates.setdefault(f'{child.scope}.{key}',
                                      f'{child.scope}.{key}')
        stack += list(child.children.values())
    bare = name.split('.')[-1]
    # Compare without scope prefixes so 'AGLUU' finds 'mmpretrain.AGLU' too.
    by_bare = {}
    for key in candidates:
        by_bare.setdefault(key.split('.')[-1], []).append(key)
    close = difflib.get_close_matches(bare, list(by_bare), n=n, cutoff=0.6)
    return [key for match in close for key in by_bare[match]][:n]


def unknown_type_hint(error: BaseException,
                      default_scope: Optional[str] = None) -> Optional[str]:
    """A "did you mean" line for an unknown ``type=`` error.

    Args:
        error (BaseException): The error a build raised (mmengine's
            ``KeyError`` or mmact's backbone ``act_cfg`` check).
        default_scope (str, optional): Scope to search when the message
            names none; the current default scope otherwise.

    Returns:
        str or None: ``'Did you mean: ...?'`` or ``'No registered name is
        close to ...'``; None when ``error`` is not about an unknown type.
    """
    message = str(error.args[0]) if error.args else str(error)
    match = _UNKNOWN_TYPE.search(message)
    registry_name = match and match['registry']
    if match is None:
        match = _UNKNOWN_LAYER.search(message)
        registry_name = 'model'
    if match is None:
        return None
    scope = match.groupdict().get('scope')
    if scope is None:
        current = DefaultScope.get_current_instance()
        scope = current.scope_name if current is not None else default_scope
    registry = _registry(registry_name, scope)
    if registry is None:
        return None
    close = closest_registered(match['name'], registry)
    if not close:
        return (f'No registered name is close to {match["name"]!r} in the '
                f'{registry.scope}::{registry.name} registry.')
    return f'Did you mean: {", ".join(close)}?'
