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


DATASET_DIRS = ('lvis', 'coco', 'v3det', 'objects365', 'imagenet')


def model_zoo_tables(page: str) -> dict:
    """The model zoo page's table rows by config: {config: {column: cell}}."""
    rows, header = {}, None
    for line in page.splitlines():
        if not line.startswith('|'):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip('|').split(' | ')]
        if cells[0] == 'config':
            header = cells
        elif header and not set(line) <= set('|-'):
            config = cells[0].strip('`')
            assert config not in rows, f'{config} listed twice'
            rows[config] = dict(zip(header, cells))
    return rows


def test_every_dataset_config_is_in_a_metafile():
    """The metafiles are the one list of the reproduced models: each config
    of a dataset folder has its entry (and its numbers, where published)."""
    listed = {
        model['Config']
        for metafile in metafiles()
        for model in yaml.safe_load(metafile.read_text())['Models']
    }
    found = {
        path.relative_to(REPO).as_posix()
        for folder in DATASET_DIRS
        for path in (REPO / 'configs' / folder).glob('*.py')
    }
    assert found - listed == set(), 'add them to their metafile.yml'
    assert listed <= found


def test_committed_model_zoo_page_is_the_generated_one(load_tool):
    zoo = load_tool('docs/model_zoo.py')
    assert (REPO / 'docs/model_zoo.md').read_text() == zoo.render(), \
        'the metafiles changed: run python docs/model_zoo.py (or make docs)'


def test_model_zoo_page_shows_every_metafile_number(load_tool):
    """docs/model_zoo.py renders every model, metric and released result of
    the metafiles, in the order of model-index.yml; '—' where none."""
    zoo = load_tool('docs/model_zoo.py')
    rows = model_zoo_tables(zoo.render())
    configs = []
    for metafile in metafiles():
        for model in yaml.safe_load(metafile.read_text())['Models']:
            configs.append(model['Config'])
            row = rows[model['Config']]
            values = {}
            for result in model.get('Results', []):
                values.update(result['Metrics'])
            metrics = set(row) - {
                'config', 'backbone', "authors' released model"
            }
            assert set(values) <= metrics, model['Name']
            for name in metrics:
                assert row[name] == str(values.get(name, '—')), \
                    (model['Name'], name)
            assert row['backbone'].replace('\\', '') == \
                model['Metadata']['Backbone']
            released = model.get('Converted From', {})
            assert row["authors' released model"].startswith(
                'converts') if released else \
                row["authors' released model"] == '', model['Name']
            for name, value in released.get('Released Results', {}).items():
                assert f'{name} {value}' in row["authors' released model"]
    assert list(rows) == configs


def test_configs_readme_is_not_a_second_copy_of_the_numbers():
    """configs/README.md keeps the recipes; the numbers live only in the
    metafiles (the model zoo page shows them): no table row names a config
    with one of its published numbers."""
    readme = (REPO / 'configs/README.md').read_text()
    rows = [line for line in readme.splitlines() if line.startswith('|')]
    for metafile in metafiles():
        for model in yaml.safe_load(metafile.read_text())['Models']:
            values = [
                str(value) for result in model.get('Results', [])
                for value in result['Metrics'].values()
            ]
            name = Path(model['Config']).stem
            for row in rows:
                assert name not in row or not any(
                    value in row for value in values), model['Name']
    assert 'model_zoo.py' in readme  # where the numbers are


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
