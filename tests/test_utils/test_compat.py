import importlib

import numpy as np
import pytest

from mmact.utils import compat


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


def test_mmengine_reads_its_checkpoints_on_torch_2_6_plus(tmp_path):
    import torch
    from mmengine.logging import HistoryBuffer
    from mmengine.runner import CheckpointLoader

    buffer = HistoryBuffer()
    buffer.update(0.5)
    path = tmp_path / 'epoch_1.pth'
    torch.save({'state_dict': {'w': torch.ones(2)},
                'message_hub': {'log_scalars': {'loss': buffer}}}, path)
    compat.patch_mmengine_checkpoint_loading()
    checkpoint = CheckpointLoader.load_checkpoint(str(path), 'cpu')
    assert checkpoint['message_hub']['log_scalars']['loss'].current() == 0.5
    # Scoped to mmengine's loader: torch's own default stays weights-only.
    with pytest.raises(Exception, match='Weights only load failed'):
        torch.load(path)
