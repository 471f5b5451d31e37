"""safe_checkpoint_loading: every scheme mmengine's CheckpointLoader
registers, the Runner's load_from and resume, served from 127.0.0.1."""
import shutil
import subprocess
import sys
import types
from pathlib import Path

import mmengine.fileio.backends.registry_utils as file_backends
import mmengine.fileio.io as file_io
import mmengine.runner.checkpoint as mmengine_checkpoint
import pytest
import torch
from mmengine.runner import CheckpointLoader

from mmact.checkpoint import (CheckpointLoadError, UnsafeCheckpointError,
                              safe_checkpoint_loading)
from mmact.testing import TRUNCATED, serve_files, tiny_runner

SCHEMES = [
    'local', 'http', 'torchvision', 'modelzoo', 'open-mmlab', 'openmmlab',
    'mmcls', 'pavi', 's3', 'petrel'
]


@pytest.fixture
def server(tmp_path, monkeypatch):
    """Files under ``tmp_path / 'served'`` at ``http://127.0.0.1:PORT``;
    downloads cached under ``tmp_path / 'torch_home'``."""
    root = tmp_path / 'served'
    root.mkdir()
    monkeypatch.setenv('TORCH_HOME', str(tmp_path / 'torch_home'))
    with serve_files(root) as url:
        yield root, url


class _FakePetrel:
    """mmengine's petrel backend, reading the served folder."""
    root: Path

    def __init__(self, **kwargs) -> None:
        pass

    def get(self, filepath: str) -> bytes:
        return (self.root / filepath.rsplit('/', 1)[-1]).read_bytes()


@pytest.fixture
def uri_of(server, monkeypatch):
    """``uri_of(scheme, name)``: the URI under which ``scheme`` reaches the
    served file ``name`` (model-zoo tables and storage clients pointed at
    the local folder and server)."""
    root, url = server

    def uri(scheme: str, name: str) -> str:
        table = {name.split('.')[0]: f'{url}/{name}'}
        if scheme == 'local':
            return str(root / name)
        if scheme == 'http':
            return f'{url}/{name}'
        if scheme in ('torchvision', 'modelzoo'):
            monkeypatch.setattr(mmengine_checkpoint, 'get_torchvision_models',
                                lambda: table)
        elif scheme in ('open-mmlab', 'openmmlab'):
            monkeypatch.setattr(mmengine_checkpoint, 'get_external_models',
                                lambda: table)
            monkeypatch.setattr(mmengine_checkpoint,
                                'get_deprecated_model_names', lambda: {})
        elif scheme == 'mmcls':
            monkeypatch.setattr(mmengine_checkpoint, 'get_mmcls_models',
                                lambda: table)
        elif scheme == 'pavi':

            def get(path):
                model = types.SimpleNamespace(name=path)
                model.download = lambda to: shutil.copy(root / path, to)
                return model

            pavi = types.ModuleType('pavi')
            pavi.modelcloud = types.SimpleNamespace(get=get)
            monkeypatch.setitem(sys.modules, 'pavi', pavi)
            return f'pavi://{name}'
        elif scheme in ('s3', 'petrel'):
            monkeypatch.setattr(_FakePetrel, 'root', root, raising=False)
            monkeypatch.setitem(file_backends.backends, 'petrel', _FakePetrel)
            monkeypatch.setattr(file_io, 'backend_instances', {})
            return f'{scheme}://bucket/{name}'
        return f'{scheme}://{name.split(".")[0]}'

    return uri


def _served(server, crafted_checkpoint):
    root, _ = server
    path, marker = crafted_checkpoint()
    shutil.copy(path, root / 'crafted.pth')
    return marker


@pytest.mark.parametrize('scheme', SCHEMES)
def test_crafted_checkpoint_is_refused_through_every_scheme(
        scheme, server, uri_of, crafted_checkpoint):
    marker = _served(server, crafted_checkpoint)
    uri = uri_of(scheme, 'crafted.pth')
    with safe_checkpoint_loading(), pytest.raises(
            UnsafeCheckpointError) as error:
        CheckpointLoader.load_checkpoint(uri)
    assert not marker.exists()
    assert str(error.value).startswith(f'checkpoint {uri!r}')
    assert 'needs posix.system' in str(error.value)


@pytest.mark.parametrize('scheme', SCHEMES)
def test_legitimate_checkpoint_loads_through_every_scheme(
        scheme, server, uri_of):
    root, _ = server
    weights = {'state_dict': {'backbone.w': torch.randn(3)}, 'meta': {}}
    torch.save(weights, root / 'good.pth')
    with safe_checkpoint_loading():
        loaded = CheckpointLoader.load_checkpoint(uri_of(scheme, 'good.pth'))
    # mmcls:// renames the keys (mmengine's _process_mmcls_checkpoint)
    [value] = loaded['state_dict'].values()
    assert torch.equal(value, weights['state_dict']['backbone.w'])


def test_trusted_uri_is_unpickled_fully(server, uri_of, crafted_checkpoint):
    marker = _served(server, crafted_checkpoint)
    uri = uri_of('http', 'crafted.pth')
    with safe_checkpoint_loading(trusted=[uri]):
        CheckpointLoader.load_checkpoint(uri)
    assert marker.exists()  # the payload is live: trust is the opt-out


def _download_error(uri: str) -> str:
    with safe_checkpoint_loading(), pytest.raises(
            CheckpointLoadError) as error:
        CheckpointLoader.load_checkpoint(uri)
    return str(error.value)


def test_html_page_and_cut_download_are_named_and_not_kept(
        server, tmp_path, crafted_checkpoint):
    root, url = server
    (root / 'page.pth').write_text('<!DOCTYPE html><html>Sign in</html>')
    message = _download_error(f'{url}/page.pth')
    cached = tmp_path / 'torch_home' / 'hub' / 'checkpoints' / 'page.pth'
    assert message.startswith(
        f"checkpoint '{url}/page.pth' (read from '{cached}') cannot be "
        'loaded: it is an HTML page')
    assert 'was removed' in message and not cached.exists()

    shutil.copy(crafted_checkpoint()[0], root / 'whole.pth')
    message = _download_error(f'{url}/{TRUNCATED}/whole.pth')
    assert message.startswith(f"checkpoint '{url}/{TRUNCATED}/whole.pth'")
    assert 'zip archive that is truncated or corrupt' in message
    assert not (cached.parent / 'whole.pth').exists()


def test_missing_url_is_named(server):
    _, url = server
    message = _download_error(f'{url}/absent.pth')
    assert message.startswith(
        f"checkpoint '{url}/absent.pth' cannot be downloaded: HTTP Error 404")


def test_runner_load_from_and_resume_are_guarded(tmp_path, crafted_checkpoint):
    tiny_runner(tmp_path / 'first', max_epochs=1).train()
    good = tmp_path / 'first' / 'epoch_1.pth'
    path, marker = crafted_checkpoint()
    for resume in (False, True):
        runner = tiny_runner(
            tmp_path / f'r{resume}',
            max_epochs=2,
            load_from=str(path),
            resume=resume)
        with safe_checkpoint_loading(), pytest.raises(UnsafeCheckpointError):
            runner.train()
        assert not marker.exists()
    # what the Runner wrote resumes through the allow-list
    runner = tiny_runner(
        tmp_path / 'second', max_epochs=2, load_from=str(good), resume=True)
    with safe_checkpoint_loading():
        runner.train()
    assert runner.epoch == 2


def test_contexts_nest_and_give_torch_load_back(tmp_path, crafted_checkpoint):
    original, schemes = torch.load, dict(CheckpointLoader._schemes)
    path, marker = crafted_checkpoint()
    with safe_checkpoint_loading():
        with safe_checkpoint_loading(trusted=[path]):
            torch.load(path)  # trusted by the inner context
        assert marker.exists()
        marker.unlink()
        with pytest.raises(UnsafeCheckpointError):
            torch.load(path, weights_only=False)  # the caller's word yields
    assert torch.load is original
    assert CheckpointLoader._schemes == schemes


def test_import_mmact_leaves_torch_load_alone():
    code = ('import torch; load = torch.load; import mmact, mmact.checkpoint; '
            'assert torch.load is load and torch.serialization.load is load')
    subprocess.run([sys.executable, '-c', code], check=True, timeout=300)
