import logging
import socket

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
from mmengine.logging import MMLogger

import mmact  # noqa: F401
from mmact.engine import CPUDistributedDataParallel


@pytest.fixture
def gloo_group(monkeypatch):
    """A one-process gloo group, as tools/dist_train.sh starts on a CPU."""
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv('MASTER_ADDR', '127.0.0.1')
    monkeypatch.setenv('MASTER_PORT', str(port))
    dist.init_process_group('gloo', rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.fixture
def log_records():
    """Records of mmengine's current logger during the test."""
    records = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    logger = MMLogger.get_current_instance()
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)


def test_sync_bn_becomes_batch_norm_with_one_warning(gloo_group, log_records):
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.SyncBatchNorm(4), nn.ReLU(),
        nn.Sequential(nn.Conv2d(4, 4, 1), nn.SyncBatchNorm(4)))
    keys = model.state_dict().keys()
    params = list(model.parameters())
    wrapped = CPUDistributedDataParallel(module=model, device_ids=[0])
    warnings = [
        r.getMessage() for r in log_records
        if 'SyncBN needs GPUs' in r.getMessage()
    ]
    assert len(warnings) == 1 and '2 layers (first: 1)' in warnings[0]
    assert not any('SyncBatchNorm' in type(m).__name__
                   for m in wrapped.module.modules())
    assert wrapped.module.state_dict().keys() == keys
    assert list(wrapped.module.parameters()) == params
    out = wrapped(torch.randn(2, 3, 8, 8))  # trains on the CPU
    out.mean().backward()
    assert params[0].grad is not None


def test_modules_off_the_cpu_are_refused(gloo_group):
    with pytest.raises(ValueError, match=r"CPU modules only.*\['meta'\]"):
        CPUDistributedDataParallel(module=nn.Linear(2, 2, device='meta'))
