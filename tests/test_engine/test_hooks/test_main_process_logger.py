import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from mmengine.config import Config
from mmengine.registry import HOOKS

import mmact  # noqa: F401
from mmact.engine.hooks import MainProcessLoggerHook
from mmact.engine.hooks import main_process_logger

TAG = {'lvis/bbox_AP': 0.25, 'lvis/bbox_APr': 0.125, 'time': 7.5}


def fake_runner(log_dir: Path, messages: list) -> SimpleNamespace:

    def log_after_epoch(runner, batches, mode, with_non_scalar):
        assert (batches, mode, with_non_scalar) == (3, 'test', True)
        return dict(TAG), 'lvis/bbox_AP: 0.2500'

    return SimpleNamespace(
        log_processor=SimpleNamespace(get_log_after_epoch=log_after_epoch),
        logger=SimpleNamespace(info=messages.append),
        test_dataloader=[0, 1, 2],
        log_dir=str(log_dir))


@pytest.mark.parametrize('main', [True, False])
def test_only_the_main_process_writes_the_metrics(tmp_path, monkeypatch,
                                                  main):
    monkeypatch.setattr(main_process_logger, 'is_main_process', lambda: main)
    hook = HOOKS.build(dict(type='MainProcessLoggerHook', interval=10))
    assert isinstance(hook, MainProcessLoggerHook) and hook.interval == 10
    hook.json_log_path = '20240101_000000.json'  # set by before_run
    messages = []
    hook.after_test_epoch(fake_runner(tmp_path, messages))
    assert messages == ['lvis/bbox_AP: 0.2500']  # every rank logs
    written = sorted(p.name for p in tmp_path.iterdir())
    if main:
        assert written == ['20240101_000000.json']  # no partial file left
        assert json.loads((tmp_path / written[0]).read_text()) == TAG
    else:
        assert written == []


@pytest.mark.parametrize('hooks, expected', [
    ({}, dict(type='MainProcessLoggerHook')),
    (dict(logger=dict(type='LoggerHook', interval=50)),
     dict(type='MainProcessLoggerHook', interval=50)),
    (dict(logger=dict(type='mmengine.LoggerHook')),
     dict(type='MainProcessLoggerHook')),
    (dict(logger=dict(type='MyLoggerHook')), dict(type='MyLoggerHook')),
    (dict(logger=None), None),
    (dict(logger=dict(interval=5)), dict(interval=5)),  # mmengine's error
])
def test_tools_test_replaces_only_the_stock_logger_hook(
        load_tool, hooks, expected):
    cfg = Config(dict(default_hooks=hooks))
    load_tool('tools/test.py').write_metrics_once(cfg)
    logger = cfg.default_hooks.logger
    assert (logger if logger is None else dict(logger)) == expected
