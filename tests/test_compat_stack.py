"""mmact.compat's checks and shims of the OpenMMLab stack: mmcv against the
installed torch, lvis under numpy 2, mmengine's checkpoints under weights-only
loading."""
import importlib
import os
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from mmengine.logging import HistoryBuffer

import mmact  # noqa: F401  (allow-lists mmengine's checkpoint classes)
from mmact.testing.tiny_runner import tiny_runner
from mmact import compat
from mmact.compat import WEIGHTS_ONLY_BY_DEFAULT, autocast_may_apply


def test_lvis_eval_sees_aliases_but_numpy_does_not():
    assert compat.patch_lvis_numpy()
    lvis_eval = importlib.import_module('lvis.eval')
    assert lvis_eval.np.float is float
    assert lvis_eval.np.cumsum is np.cumsum
    # The shim is local to lvis.eval: numpy 2 itself keeps no alias.
    assert not hasattr(np, 'float')


def test_patch_is_idempotent():
    compat.patch_lvis_numpy()
    shim = importlib.import_module('lvis.eval').np
    compat.patch_lvis_numpy()
    assert importlib.import_module('lvis.eval').np is shim


def test_import_mmact_leaves_lvis_to_its_first_import():
    """A fresh ``import mmact`` imports neither lvis nor the matplotlib
    pyplot lvis imports; lvis.eval, imported later, sees the aliases."""
    code = ('import sys, mmact\n'
            "assert 'lvis' not in sys.modules, 'lvis'\n"
            "assert 'matplotlib.pyplot' not in sys.modules, 'pyplot'\n"
            'from lvis import LVISEval\n'
            'import lvis.eval\n'
            'assert lvis.eval.np.float is float\n'
            "assert not hasattr(sys.modules['numpy'], 'float')\n")
    done = subprocess.run([sys.executable, '-c', code],
                          capture_output=True,
                          text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]


def test_check_mmcv_passes_on_this_stack():
    compat.check_mmcv()


def test_check_mmcv_explains_ops_built_for_another_torch(monkeypatch):
    real_import = importlib.import_module

    def broken_ext(name, *args, **kwargs):
        if name == 'mmcv._ext':
            raise ImportError('mmcv/_ext.so: undefined symbol: _ZN3c10foo')
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(compat.importlib, 'import_module', broken_ext)
    with pytest.raises(ImportError, match='built against another torch'):
        compat.check_mmcv()


def test_check_mmcv_rejects_versions_mmdet_cannot_use(monkeypatch):
    import mmcv
    monkeypatch.setattr(mmcv, '__version__', '2.2.0')
    with pytest.raises(ImportError, match=r'mmcv>=2\.0\.0rc4,<2\.2\.0'):
        compat.check_mmcv()


def test_runner_checkpoints_load_weights_only_and_resume(tmp_path):
    tiny_runner(tmp_path / 'first', max_epochs=1).train()
    path = tmp_path / 'first' / 'epoch_1.pth'
    # as this torch loads by default: weights only from torch 2.6
    checkpoint = torch.load(path)
    loss = checkpoint['message_hub']['log_scalars']['train/loss']
    assert isinstance(loss, HistoryBuffer) and np.isfinite(loss.mean())
    assert checkpoint['meta']['epoch'] == 1
    runner = tiny_runner(
        tmp_path / 'second', max_epochs=2, load_from=str(path), resume=True)
    runner.train()
    assert runner.epoch == 2 and runner.iter == 4
    torch.testing.assert_close(
        torch.load(tmp_path / 'second' /
                   'epoch_2.pth')['state_dict']['fc.weight'],
        runner.model.fc.weight.detach())


class _Payload:
    """Stands for any object a checkpoint must not be able to create."""


@pytest.mark.skipif(
    not WEIGHTS_ONLY_BY_DEFAULT,
    reason='mmact extends the weights-only allow-list from torch 2.6, '
    f'where it is the default (torch {torch.__version__})')
@pytest.mark.parametrize(
    'obj, message',
    [(_Payload(), 'Unsupported global'),
     (HistoryBuffer.update, r'getattr\(.*HistoryBuffer.*update'),
     (np.ndarray.tofile, r'getattr\(.*ndarray.*tofile')])
def test_weights_only_still_refuses_other_objects(tmp_path, obj, message):
    path = tmp_path / 'other.pth'
    torch.save({'state_dict': {'w': torch.ones(1)}, 'extra': obj}, path)
    with pytest.raises(pickle.UnpicklingError, match=message):
        torch.load(path, weights_only=True)


def _other_stacks_mmcv_wheel():
    """The shared mmcv wheel built against a torch other than this one."""
    wheels = Path(
        os.environ.get(
            'MMACT_WHEELS',
            Path(__file__).resolve().parents[3] / 'shared' / 'wheels'))
    this = f'torch-{torch.__version__.split("+")[0]}-'
    found = sorted(
        p for p in wheels.glob('torch-*/mmcv-2.1.0-*.whl')
        if not p.parent.name.startswith(this))
    return found[0] if found else None


@pytest.mark.skipif(
    _other_stacks_mmcv_wheel() is None,
    reason='no mmcv wheel built for another torch in ../shared/wheels')
def test_check_mmcv_on_ops_really_built_for_another_torch(tmp_path):
    """The other stack's mmcv wheel, unpacked beside this torch: its ops
    fail to load with an undefined symbol, and check_mmcv says how to
    rebuild (on both CI stacks, each with the other's wheel)."""
    with zipfile.ZipFile(_other_stacks_mmcv_wheel()) as wheel:
        wheel.extractall(
            tmp_path, [n for n in wheel.namelist() if n.startswith('mmcv/')])
    code = ('from mmact.compat import check_mmcv\n'
            'try:\n    check_mmcv()\n'
            'except ImportError as e:\n    print("refused:", e)\n')
    out = subprocess.run([sys.executable, '-c', code],
                         env=dict(os.environ, PYTHONPATH=str(tmp_path)),
                         capture_output=True,
                         text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert 'refused: mmcv 2.1.0 has compiled ops that do not load against ' \
        f'the installed torch {torch.__version__}' in out.stdout, out.stdout
    assert 'built against another torch' in out.stdout
    assert 'MMCV_WITH_OPS=1 pip install' in out.stdout


def test_autocast_may_apply():
    """False only where autocast is known to be off (what lets FleS skip
    entering ``torch.autocast(enabled=False)``)."""
    assert not autocast_may_apply('cpu')
    assert not autocast_may_apply('cuda')
    with torch.autocast('cpu', dtype=torch.bfloat16):
        assert autocast_may_apply('cpu')
    assert autocast_may_apply('xpu')  # unknown here: assume it may
