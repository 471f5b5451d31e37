"""safe_load: crafted checkpoints refused before anything runs, legitimate
ones read as torch.load reads them, bad files named in a clear error."""
import argparse
import builtins
import collections
import io
import os
import pickle
import re
import subprocess

import numpy as np
import pytest
import torch
from mmengine.logging import HistoryBuffer

from mmact.checkpoint import (TRUST_FLAG, CheckpointLoadError,
                              UnsafeCheckpointError, allowed_globals,
                              safe_load)


class _Calls:
    """Unpickling it calls ``function(*args)``."""

    def __init__(self, function, *args) -> None:
        self.function, self.args = function, args

    def __reduce__(self):
        return self.function, self.args


def _refusal(path, name: str) -> str:
    """The one message: the file, the refused global, the opt-out."""
    return (f"checkpoint '{path}' needs {name}, which is not on mmact's "
            'allow-list')


@pytest.mark.parametrize('legacy', [False, True], ids=['zip', 'legacy'])
def test_crafted_checkpoint_is_refused_before_it_runs(crafted_checkpoint,
                                                      legacy):
    path, marker = crafted_checkpoint(legacy=legacy)
    with pytest.raises(UnsafeCheckpointError) as error:
        safe_load(path)
    assert not marker.exists()
    message = str(error.value)
    assert message.startswith(_refusal(path, 'posix.system'))
    assert f'{TRUST_FLAG} {path}' in message and 'trusted=' in message
    # the payload is live: a trusted load runs it
    safe_load(path, trusted=True)
    assert marker.exists()


@pytest.mark.parametrize('payload, refused', [
    (_Calls(builtins.eval, '1'), 'builtins.eval'),
    (_Calls(builtins.exec, 'pass'), 'builtins.exec'),
    (_Calls(subprocess.Popen, ['true']), 'subprocess.Popen'),
    (_Calls(os.remove, '/nonexistent'), 'posix.remove'),
    (_Calls(getattr, np.ndarray,
            'tofile'), "getattr(<class 'numpy.ndarray'>, 'tofile')"),
    (_Calls(getattr, HistoryBuffer, 'update'),
     "getattr(<class 'mmengine.logging.history_buffer.HistoryBuffer'>, 'update')"
     ), (_Calls(torch.hub.load, 'x/y', 'z'), 'torch.hub.load'),
    (_Calls(np.load, 'x.npy'), 'numpy.load')
])
def test_every_global_outside_the_list_is_refused(tmp_path, payload, refused):
    path = tmp_path / 'payload.pth'
    torch.save({'w': torch.ones(1), 'x': payload}, path)
    with pytest.raises(
            UnsafeCheckpointError, match=re.escape(f'needs {refused}, ')):
        safe_load(path)


def test_torchscript_archive_is_refused(tmp_path):
    path = tmp_path / 'scripted.pt'
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), path)
    with pytest.raises(UnsafeCheckpointError, match='TorchScript archive'):
        safe_load(path)


def test_file_objects_are_guarded_too(crafted_checkpoint):
    path, marker = crafted_checkpoint()
    with pytest.raises(UnsafeCheckpointError):
        safe_load(io.BytesIO(path.read_bytes()), source='s3://bucket/x.pth')
    assert not marker.exists()


def _all_kinds() -> dict:
    """Everything the allow-list admits, as checkpoints hold it."""
    buffer = HistoryBuffer()
    buffer.update(0.5)
    return {
        'state_dict':
        collections.OrderedDict(
            f32=torch.randn(3, 4),
            f16=torch.ones(2, dtype=torch.float16),
            bf16=torch.ones(2, dtype=torch.bfloat16),
            i64=torch.arange(3),
            b=torch.tensor([True]),
            strided=torch.randn(4, 4)[:, ::2],
            param=torch.nn.Parameter(torch.ones(2))),
        'numpy': [np.arange(3),
                  np.float64(0.5),
                  np.int64(3),
                  np.float32(1)],
        'numpy_state':
        np.random.get_state(),
        'python': [{1, 2},
                   frozenset([3]), b'bytes', b'',
                   bytearray(b'x'), 1 + 2j,
                   slice(1, 2),
                   range(3), (1, 'a', None, True)],
        'torch': [
            torch.float16,
            torch.device('cpu'),
            torch.Size([2]), torch.__version__
        ],
        'history':
        buffer,
        'args':
        argparse.Namespace(lr=0.1, device='cuda', weights=None),
        'counter':
        collections.Counter('aab'),
        'rng':
        torch.get_rng_state(),
    }


@pytest.mark.parametrize('legacy', [False, True], ids=['zip', 'legacy'])
def test_everything_admitted_loads_as_torch_loads_it(tmp_path, legacy, same):
    path, kinds = tmp_path / 'kinds.pth', _all_kinds()
    torch.save(kinds, path, _use_new_zipfile_serialization=not legacy)
    ours = safe_load(path, map_location='cpu')
    theirs = torch.load(path, map_location='cpu', weights_only=False)
    assert same(ours, theirs) and same(ours, kinds)
    assert ours['history'].mean() == 0.5  # its statistics methods work


def test_mmap_and_map_location_are_passed_on(tmp_path):
    path = tmp_path / 'w.pth'
    torch.save({'w': torch.arange(4.)}, path)
    loaded = safe_load(path, map_location=torch.device('cpu'), mmap=True)
    assert torch.equal(loaded['w'], torch.arange(4.))


def test_allow_list_resolves_names_without_importing(tmp_path):
    """Names are looked up in the table: a module absent here (numpy 2's
    numpy._core on numpy 1, or the reverse) still resolves."""
    table = allowed_globals()
    for core in ('numpy.core', 'numpy._core'):
        assert table[f'{core}.multiarray._reconstruct'] is \
            table['numpy.core.multiarray._reconstruct']
    assert 'builtins.getattr' in table and 'posix.system' not in table
    assert table['builtins.getattr'] is not getattr


def _bad_files(tmp_path, crafted_checkpoint):
    good, _ = crafted_checkpoint('good.pth')
    data = good.read_bytes()
    legacy, _ = crafted_checkpoint('legacy.pth', legacy=True)
    files = {
        'empty': (b'', 'the file is empty'),
        'text': (b'epoch: 12\n', 'neither a torch zip archive nor a torch '
                 "pickle (it starts with b'epoch: 12"),
        'html': (b'<!DOCTYPE html>\n<html><body>Sign in</body></html>',
                 'it is an HTML page'),
        'truncated zip': (data[:len(data) // 2], 'zip archive that is '
                          'truncated or corrupt'),
        'truncated legacy':
        (legacy.read_bytes()[:40], 'pickle that is truncated or corrupt'),
    }
    for name, (content, _) in files.items():
        (tmp_path / name).write_bytes(content)
    return files


def test_files_that_are_not_checkpoints_are_named(tmp_path,
                                                  crafted_checkpoint):
    for name, (_, what) in _bad_files(tmp_path, crafted_checkpoint).items():
        with pytest.raises(CheckpointLoadError) as error:
            safe_load(tmp_path / name)
        message = str(error.value)
        assert message.startswith(
            f"checkpoint '{tmp_path / name}' cannot be loaded: "), message
        assert what in message and 'Nothing was loaded.' in message, message


def test_other_errors_are_not_reworded(tmp_path):
    with pytest.raises(FileNotFoundError):
        safe_load(tmp_path / 'absent.pth')
    path = tmp_path / 'w.pth'
    torch.save({'w': torch.ones(1)}, path)
    with pytest.raises((RuntimeError, ValueError), match='cuda|CUDA|device'):
        safe_load(path, map_location='cuda:99')


def test_refusal_is_an_unpickling_error(crafted_checkpoint):
    """Code that catches torch's weights-only refusal catches mmact's."""
    path, _ = crafted_checkpoint()
    with pytest.raises(pickle.UnpicklingError):
        safe_load(path)
