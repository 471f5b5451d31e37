"""Fixtures of the checkpoint-loading tests."""
from typing import Any, Callable

import numpy as np
import pytest
import torch
from mmengine.logging import HistoryBuffer


def _same(a: Any, b: Any) -> bool:
    if torch.is_tensor(a):
        return type(a) is type(b) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, HistoryBuffer):
        return a.mean() == b.mean() and a.current() == b.current()
    if isinstance(a, dict):
        return type(a) is type(b) and a.keys() == b.keys() and all(
            _same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(map(_same, a, b))
    return type(a) is type(b) and a == b


@pytest.fixture
def same() -> Callable[[Any, Any], bool]:
    """Whether two loaded checkpoints are equal: tensors of one type,
    dtype and value, numpy arrays, history buffers by their statistics,
    containers element by element."""
    return _same
