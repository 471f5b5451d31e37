"""Fixtures shared by the whole test suite."""
import json
from typing import Callable, Dict, Tuple

import pytest


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
