"""mmact.registry: ``import mmact`` registers, mmdet / mmpretrain parts load
when their registries are first used."""
import subprocess
import sys
import types

from mmengine.registry import MODELS, Registry

from mmact.registry import import_on_first_lookup


def _run(code: str) -> str:
    result = subprocess.run([sys.executable, '-c', code],
                            capture_output=True,
                            text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_import_mmact_leaves_model_zoos_until_a_registry_looks_up():
    out = _run('''
import sys
import mmact
from mmengine.registry import HOOKS, METRICS, MODELS, DefaultScope
heavy = ('mmdet.models', 'mmpretrain.models', 'mmact.models.backbones',
         'mmact.models.heads', 'mmact.models.losses')
assert not [m for m in heavy if m in sys.modules], sys.modules.keys()
# root parts are registered by the import itself
assert MODELS.get('AGLU') is not None and HOOKS.get('ActivationStatsHook')
assert METRICS.get('ShotAccuracy') is not None
import mmdet.registry as det
import mmpretrain.registry as cls
assert det.HOOKS.get('GOLFrequencyHook') is not None
with DefaultScope.overwrite_default_scope('mmdet'):
    backbone = MODELS.build(dict(type='ActResNet', depth=18))
assert type(backbone) is det.MODELS.get('ActResNet')  # mmdet's face
assert 'mmact.models.backbones' in sys.modules
assert det.MODELS.get('GOLLoss') is cls.MODELS.get('mmdet.GOLLoss')
assert cls.MODELS.get('PCSoftmaxArcFaceClsHead') is not None
# one name per registry, each with that registry's contract
assert cls.MODELS.get('ActResNet').__name__ == 'ActResNet'
assert det.MODELS.get('ActResNet').__name__ == 'DetActResNet'
print('ok')
''')
    assert out.strip().endswith('ok')


def test_registry_used_before_import_mmact():
    out = _run('''
import sys
from mmdet.registry import MODELS
assert MODELS.get('ResNet') is not None  # imports mmdet's locations
import mmact
assert 'mmact.models.backbones' in sys.modules  # imported at once
assert MODELS.get('ActResNet') is not None
assert MODELS.get('GOLLoss') is not None
print('ok')
''')
    assert out.strip().endswith('ok')


def test_import_on_first_lookup(tmp_path, monkeypatch):
    registry = Registry('probe', parent=MODELS, scope='mmact_probe')
    holder = types.ModuleType('mmact_probe_registry')
    holder.REGISTRY = registry
    monkeypatch.setitem(sys.modules, 'mmact_probe_registry', holder)
    (tmp_path / 'mmact_probe_module.py').write_text(
        'from mmact_probe_registry import REGISTRY\n\n\n'
        '@REGISTRY.register_module()\n'
        'class Probe:\n'
        '    pass\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    import_on_first_lookup('mmact_probe_module', registry)
    # the shared default list of registries without locations is untouched
    assert Registry('other', scope='mmact_probe')._locations == []
    assert 'mmact_probe_module' not in sys.modules
    assert registry.get('Probe').__name__ == 'Probe'
    assert 'mmact_probe_module' in sys.modules
    monkeypatch.delitem(sys.modules, 'mmact_probe_module')
