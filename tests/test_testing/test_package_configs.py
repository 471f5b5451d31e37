"""mmact.testing.remember_package_configs: mmengine answers each
``package::`` config look-up once per process, with the same answers."""
from pathlib import Path

import pytest
from mmengine.config import Config, config
from mmengine.config import utils as config_utils
from mmengine.utils import get_installed_path

from mmact.testing.package_configs import (_remembered_installs,
                                           _remembered_path,
                                           remember_package_configs)

REPO = Path(__file__).resolve().parents[2]


def test_look_ups_are_answered_once_with_mmengines_answers(monkeypatch):
    reads = []
    load = config_utils.load
    monkeypatch.setattr(config_utils, 'load',
                        lambda path: reads.append(path) or load(path))
    look_up = config_utils._get_external_cfg_path
    remembered = _remembered_path(look_up)
    mmdet = get_installed_path('mmdet')
    # a _base_ file is no model of the metafiles: mmengine's ValueError
    # sends Config to the _base_ files, again without reading them
    for name in ('_base_/models/mask-rcnn_r50_fpn.py',
                 'mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py'):
        with pytest.raises(ValueError, match='Expected configs') as theirs:
            look_up(mmdet, name)
        assert reads
        for _ in range(2):
            reads.clear()
            with pytest.raises(ValueError) as ours:
                remembered(mmdet, name)
        assert str(ours.value) == str(theirs.value)
        assert reads == []
    # a path found is returned as found, the look-up done once
    asked = []
    found = _remembered_path(
        lambda package, name: asked.append(name) or f'{package}/{name}')
    assert [found('/p', 'a.py'), found('/p', 'a.py')] == ['/p/a.py'] * 2
    assert asked == ['a.py']


def test_installs_found_are_remembered_absent_ones_asked_again():
    asked = []

    def is_installed(package):
        asked.append(package)
        return package == 'mmdet'

    remembered = _remembered_installs(is_installed)
    assert [remembered(p) for p in ('mmdet', 'mmdet', 'nope', 'nope')] == \
        [True, True, False, False]
    assert asked == ['mmdet', 'nope', 'nope']


def test_configs_parse_as_without_it(monkeypatch):
    """A shipped config with mmdet:: bases parses to the same dict; a second
    remember_package_configs changes nothing."""
    path = str(REPO / 'configs/lvis/apa_mrcnn_r50.py')
    remember_package_configs()
    remembered = config._get_external_cfg_path
    remember_package_configs()
    assert config._get_external_cfg_path is remembered
    assert remembered.__wrapped__ is config_utils._get_external_cfg_path
    parsed = Config.fromfile(path).to_dict()
    monkeypatch.setattr(config, '_get_external_cfg_path',
                        config_utils._get_external_cfg_path)
    monkeypatch.setattr(config, 'is_installed',
                        config.is_installed.__wrapped__)
    assert Config.fromfile(path).to_dict() == parsed
