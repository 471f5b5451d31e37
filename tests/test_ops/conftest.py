"""What the ops tests share: which of mmact's torch operators a call ran,
read from the profiler (a public seam, no patch of mmact's modules)."""
import contextlib
from typing import Iterator, List

import pytest
import torch


@contextlib.contextmanager
def recording() -> Iterator[List[str]]:
    names: List[str] = []
    with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        yield names
    names.extend(e.name for e in prof.events() if e.name.startswith('mmact::'))


@pytest.fixture
def mmact_ops():
    """``with mmact_ops() as ran:``: after the block, ``ran`` lists the
    ``mmact::`` operators the block called, in order."""
    return recording
