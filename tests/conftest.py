"""Fixtures shared by the whole test suite."""
import gc
import importlib.util
import json
import os
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Callable, Dict, Iterator, List, Tuple

import pytest
import torch

from mmact.compat import CPU_AUTOCAST_FLOAT16
from mmact.testing.package_configs import remember_package_configs
from mmact.testing.stack_rule import StackUse, stack_imports

REPO = Path(__file__).resolve().parents[1]
#: What a stack_independent test's fixtures used of the stack while they
#: were set up (checked with the test's own use, pytest_runtest_call).
_SETUP_USE = pytest.StashKey[List[str]]()


@pytest.fixture(scope='session')
def load_tool() -> Callable[[str], ModuleType]:
    """Import a script of the repository (``tools/...``) as a module.

    ``load_tool('tools/test.py')`` executes the file under a module name of
    its own (not as ``__main__``, so its ``main()`` does not run) and returns
    a fresh module on every call, so a test may patch it freely.
    """

    def load(path: str) -> ModuleType:
        name = 'mmact_tool_' + re.sub(r'\W', '_', path)
        spec = importlib.util.spec_from_file_location(name, REPO / path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


class _RunsCode:
    """Unpickling it runs ``touch <marker>``: a crafted checkpoint."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f'touch {self.marker}', )


@pytest.fixture
def crafted_checkpoint(tmp_path) -> Callable[..., Tuple[Path, Path]]:
    """``crafted_checkpoint(name, legacy=False)`` writes a checkpoint whose
    unpickling would create a file, beside real weights under
    ``state_dict``, and returns ``(checkpoint, marker file)``; the marker
    does not exist until something unpickles the payload."""

    def write(name: str = 'crafted.pth',
              legacy: bool = False) -> Tuple[Path, Path]:
        path, marker = tmp_path / name, tmp_path / f'{name}.ran'
        torch.save(
            {
                'state_dict': {
                    'w': torch.ones(2)
                },
                'meta': _RunsCode(marker)
            },
            path,
            _use_new_zipfile_serialization=not legacy)
        assert not marker.exists()
        return path, marker

    return write


@pytest.fixture(params=[
    'bfloat16',
    pytest.param(
        'float16',
        marks=pytest.mark.skipif(
            not CPU_AUTOCAST_FLOAT16,
            reason='CPU autocast to float16 needs torch >= 2.2'))
])
def cpu_autocast_dtype(request) -> torch.dtype:
    """Each dtype ``torch.autocast('cpu', dtype=...)`` takes on this torch
    (float16 skips, with the reason, where it takes bfloat16 only)."""
    return getattr(torch, request.param)


@pytest.fixture(scope='session')
def toy_data_root(tmp_path_factory) -> Callable[..., str]:
    """Toy dataset roots, each written once per test session.

    ``toy_data_root(fmt, **options)`` returns the root of
    ``mmact.testing.generate_toy_data(fmt, root, **options)``; later calls
    with the same format and options return the same root. Tests share
    these roots, so they must not write into them (copy or symlink them into
    ``tmp_path`` to build a ``data/`` folder).

    Example:
        >>> def test_x(toy_data_root, tmp_path):
        ...     root = toy_data_root('lvis', num_train=12, num_val=4)
        ...     (tmp_path / 'data').mkdir()
        ...     (tmp_path / 'data' / 'toy_lvis').symlink_to(root)
    """
    from mmact.testing import generate_toy_data, resolve_options
    roots: Dict[Tuple[str, str], str] = {}

    def get(fmt: str, **options) -> str:
        key = (fmt, json.dumps(resolve_options(fmt, options), sort_keys=True))
        if key not in roots:
            folder = tmp_path_factory.mktemp(f'toy_{fmt}')
            roots[key] = generate_toy_data(fmt, str(folder / f'toy_{fmt}'),
                                           **options)
        return roots[key]

    return get


@pytest.fixture(scope='session')
def tiny_cls_root(toy_data_root) -> str:
    """The generated set the tiny-cls tool-test configs
    (``tests/test_tools/configs/tiny-cls_*.py``) train on: 23 training
    images of 4 long-tailed classes, 8 for validation."""
    return toy_data_root(
        'cls',
        num_classes=4,
        imbalance=2,
        max_per_class=8,
        num_val_per_class=2)


@pytest.fixture(scope='session')
def with_tiny_cls_data(tiny_cls_root) -> Callable[[Path], Path]:
    """``with_tiny_cls_data(folder)`` gives ``folder`` the ``data/toy_cls``
    the tiny-cls configs read (a link to :func:`tiny_cls_root`), as a
    user's checkout has, and returns it."""

    def link(folder: Path) -> Path:
        (folder / 'data').mkdir()
        (folder / 'data' / 'toy_cls').symlink_to(tiny_cls_root)
        return folder

    return link


def _mmengine_globals() -> list:
    """mmengine's classes of named global instances (``ManagerMixin``: the
    visualizer, logger, message hub, default scope and their subclasses),
    if mmengine is imported (importing it here would use the stack in a
    ``stack_independent`` test)."""
    manager = sys.modules.get('mmengine.utils.manager')
    if manager is None:
        return []
    found, todo = [], [manager.ManagerMixin]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return [cls for cls in found if '_instance_dict' in vars(cls)]


@pytest.fixture(autouse=True)
def _drop_mmengine_globals() -> Iterator[None]:
    """Drop the named global instances a test created when it ends.

    A Runner takes the visualizer of the name its config gives (mmdet's
    configs: ``'visualizer'``) if one exists, and its logger and message hub
    are named after the config file and the second it starts: a test's
    Runner would otherwise write through an earlier test's instances into
    that test's ``tmp_path``, removed once it passed (setup.cfg:
    ``tmp_path_retention_policy``).
    """
    before = {cls: set(cls._instance_dict) for cls in _mmengine_globals()}
    yield
    for cls in _mmengine_globals():
        for name in set(cls._instance_dict) - before.get(cls, set()):
            instance = cls._instance_dict.pop(name)
            for handler in getattr(instance, 'handlers', []):
                handler.close()


def pytest_collection_modifyitems(config: pytest.Config,
                                  items: List[pytest.Item]) -> None:
    """Modules that hold ``slow`` tests run first, each as one unit (Makefile:
    ``--dist loadscope``), so the two workers finish on the many short
    modules together instead of one waiting on the other's last training."""
    slow_modules = {
        item.module.__name__
        for item in items if item.get_closest_marker('slow')
    }
    items.sort(key=lambda item: item.module.__name__ not in slow_modules)


def pytest_collection_finish(session: pytest.Session) -> None:
    """What exists once the tests are collected (the stack's modules, the
    test modules) lives for the whole run: frozen out of the garbage
    collector's reach, each collection walks only what the tests allocate
    (mmengine's datasets call ``gc.collect()`` once each: 0.28 s a call
    over the suite's heap on the 2-core machine)."""
    gc.freeze()


def pytest_configure(config: pytest.Config) -> None:
    """One torch thread per xdist worker (and its subprocesses): the
    workers already share the cores, more threads only oversubscribe.
    The launchers' torchrun looks at its workers every 0.1 s on both stacks
    (``PET_MONITOR_INTERVAL``, torch 2.14's default; torch 2.1's 5 s ends
    each 2-process job up to 5 s after its workers did). mmengine answers
    each ``mmdet::`` config look-up once (the suite parses the shipped
    configs hundreds of times)."""
    os.environ.setdefault('PET_MONITOR_INTERVAL', '0.1')
    remember_package_configs()
    if os.environ.get('PYTEST_XDIST_WORKER'):
        for name in ('OMP_NUM_THREADS', 'MKL_NUM_THREADS'):
            os.environ.setdefault(name, '1')
        torch.set_num_threads(1)


def _stack_independent(item: pytest.Item) -> bool:
    return item.get_closest_marker('stack_independent') is not None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    """Record what a ``stack_independent`` test's fixtures use of the
    stack while they are set up (mmact.testing.stack_rule)."""
    if not _stack_independent(item):
        return (yield)
    with StackUse() as use:
        try:
            return (yield)
        finally:
            item.stash[_SETUP_USE] = use.found


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """Hold each ``stack_independent`` test to the rule of
    :mod:`mmact.testing.stack_rule` (make test-torch2.1 leaves these tests
    out): it fails naming the torch operator, numpy function, process or
    import of the stack that it or its fixtures used."""
    if not _stack_independent(item):
        return (yield)
    with StackUse() as use:
        result = yield
    used = item.stash.get(_SETUP_USE, []) + use.found
    imported = stack_imports(item.module, getattr(item, 'function', None))
    if used or imported:
        what = [f'imports {", ".join(imported)}'] if imported else []
        what += [f'used {", ".join(used)}'] if used else []
        pytest.fail(
            f'{item.nodeid} is marked stack_independent (make '
            'test-torch2.1 leaves it out) but its outcome can depend on the '
            f'stack (mmact/testing/stack_rule.py): it {"; ".join(what)}. '
            'Remove the mark or the use.',
            pytrace=False)
    return result
