"""mmengine's look-ups of ``package::`` config paths, once per process.

``Config.fromfile`` resolves each ``mmdet::...`` (``mmpretrain::...``)
path of a config by reloading ``pkg_resources`` to see that the package is
installed and reading every metafile its ``.mim/model-index.yml`` lists
(mmdet's hundred YAML files) to find the path among its models (mmengine
0.10.7 never finds one there: it looks for the name without its ``.py``
among names with it), before it takes the path as a ``_base_`` file. The
answers depend on the installed packages alone, which a test session does
not change, and the test processes parse the shipped configs hundreds of
times: :func:`remember_package_configs` keeps each answer for the process.
"""
import functools
from typing import Callable, Dict, Tuple

__all__ = ['remember_package_configs']


def _remembered_path(look_up: Callable[[str, str], str]) -> Callable:
    """``look_up`` (mmengine's ``_get_external_cfg_path``) answering each
    ``(package_path, cfg_file)`` once: its path, or again the ValueError
    that sends mmengine to the ``_base_`` files."""
    answers: Dict[Tuple[str, str], Tuple[str, str]] = {}

    @functools.wraps(look_up)
    def remembered(package_path: str, cfg_file: str) -> str:
        key = (package_path, cfg_file)
        if key not in answers:
            try:
                answers[key] = (look_up(package_path, cfg_file), '')
            except ValueError as error:
                answers[key] = ('', str(error))
        path, error = answers[key]
        if error:
            raise ValueError(error)
        return path

    return remembered


def _remembered_installs(is_installed: Callable[[str], bool]) -> Callable:
    """``is_installed`` remembering the packages it found (one that is
    absent is looked for again: it may be installed meanwhile)."""
    found = set()

    @functools.wraps(is_installed)
    def remembered(package: str) -> bool:
        if package not in found and is_installed(package):
            found.add(package)
        return package in found

    return remembered


def remember_package_configs() -> None:
    """Make ``mmengine.config.Config`` answer each ``package::`` path's
    look-up once per process (a second call changes nothing)."""
    from mmengine.config import config
    if getattr(config._get_external_cfg_path, '__wrapped__', None) is None:
        config._get_external_cfg_path = _remembered_path(
            config._get_external_cfg_path)
        config.is_installed = _remembered_installs(config.is_installed)
