"""OpenMMLab packaging: the configs' metafiles, the model index, and a wheel
that carries configs, tools and the index in ``mmact/.mim``."""
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


def metafiles():
    index = yaml.safe_load((REPO / 'model-index.yml').read_text())
    return [REPO / path for path in index['Import']]


def test_model_index_names_every_metafile_and_its_configs_exist():
    found = sorted(REPO.glob('configs/*/metafile.yml'))
    assert sorted(metafiles()) == found and len(found) >= 5
    names = []
    for metafile in found:
        for model in yaml.safe_load(metafile.read_text())['Models']:
            assert (REPO / model['Config']).is_file(), \
                f'{metafile.relative_to(REPO)}: {model["Name"]} names ' \
                f'{model["Config"]}, which does not exist'
            assert Path(model['Config']).stem == model['Name'] or \
                model['Name'] == 'apa_mrcnn_r50'
            names.append(model['Name'])
    assert len(names) == len(set(names))
    assert 'apa_mrcnn_r50' in names  # the mission's config


def test_published_numbers_match_the_configs_readme():
    """Each metafile result is the paper's number the configs' README
    lists for that config."""
    readme = (REPO / 'configs/README.md').read_text()
    for metafile in metafiles():
        for model in yaml.safe_load(metafile.read_text())['Models']:
            row = next((line for line in readme.splitlines()
                        if f'({model["Config"][len("configs/"):]})' in line),
                       None)
            assert row is not None, model['Name']
            for result in model.get('Results', []):
                for value in result['Metrics'].values():
                    assert str(value) in row, (model['Name'], value)


@pytest.mark.slow
def test_a_wheel_carries_configs_tools_and_the_model_index(tmp_path):
    """Built from a copy of the checkout's tracked files (the build copies
    into ``mmact/.mim``, where an editable install keeps links)."""
    files = subprocess.run([
        'git', 'ls-files', '-z', '--cached', '--others', '--exclude-standard'
    ],
                           cwd=REPO,
                           capture_output=True,
                           check=True).stdout.decode().split('\0')
    source = tmp_path / 'src'
    for name in filter(None, files):
        target = source / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if (REPO / name).is_file():
            shutil.copy2(REPO / name, target)
    subprocess.run([
        sys.executable, '-m', 'pip', 'wheel', '-q', '--no-deps',
        '--no-build-isolation', '-w',
        str(tmp_path / 'dist'),
        str(source)
    ],
                   check=True)
    wheel, = (tmp_path / 'dist').glob('mmact-*.whl')
    names = set(zipfile.ZipFile(wheel).namelist())
    for path in ('mmact/.mim/configs/lvis/apa_mrcnn_r50.py',
                 'mmact/.mim/tools/train.py', 'mmact/.mim/model-index.yml',
                 'mmact/.mim/configs/lvis/metafile.yml',
                 'mmact/ops/csrc/apa.c'):
        assert path in names, path
    index = zipfile.ZipFile(wheel).read('mmact/.mim/model-index.yml')
    assert b'configs/lvis/metafile.yml' in index
