"""The names the pages give converted checkpoints of the authors' released
models: the model zoo's (each metafile's ``Converted From`` command writes
``work_dirs/authors/<config name>.pth``), wherever a page, a test or the
code writes ``work_dirs/authors/...``, and the config a command tests it
with is that model's."""
import re
from pathlib import Path
from typing import Dict, List

import pytest
import yaml

from mmact.testing.doc_text import SourceText, source_texts

# reads pages, metafiles and sources only
pytestmark = pytest.mark.stack_independent

REPO = Path(__file__).resolve().parents[1]
#: a converted checkpoint of the authors' models, as the pages name it
CONVERTED = re.compile(
    r'\bwork_dirs/authors/(?P<name>[\w.-]+?)\.(?:pth|safetensors)\b')
#: a config a command names, then a converted checkpoint (one command)
TESTED_WITH = re.compile(r'\bconfigs/\w+/(?P<config>[\w.-]+)\.py[ \t\\\n]+'
                         r'work_dirs/authors/(?P<name>[\w.-]+?)\.'
                         r'(?:pth|safetensors)\b')


def short_names(root: Path) -> Dict[str, str]:
    """Config name -> the config it only renames (a file whose one
    setting is ``_base_ = './<name>.py'``)."""
    names = {}
    for config in root.glob('configs/*/*.py'):
        code = [
            line for line in config.read_text().splitlines()
            if line.strip() and not line.startswith('#')
        ]
        match = re.fullmatch(r"_base_ = '\./([\w.-]+)\.py'", ' '.join(code))
        if match:
            names[config.stem] = match[1]
    return names


def zoo_names(root: Path) -> Dict[str, str]:
    """Config name -> the name of its converted checkpoint, from every
    metafile's ``Converted From`` command.

    Raises:
        AssertionError: A command writes another name than its model's
            config name (a short name's: the config it renames).
    """
    renames = short_names(root)
    names = {}
    for metafile in root.glob('configs/*/metafile.yml'):
        for model in yaml.safe_load(metafile.read_text())['Models']:
            if 'Converted From' not in model:
                continue
            config = Path(model['Config']).stem
            [written] = CONVERTED.findall(model['Converted From']['Code'])
            assert written == renames.get(config, config), (
                f'{metafile.relative_to(root)}: {model["Name"]} converts to '
                f'work_dirs/authors/{written}.pth, not its config\'s name '
                f'{renames.get(config, config)}')
            names[config] = written
    return names


def misnamed(texts: List[SourceText], names: Dict[str, str]) -> Dict:
    """``path:line`` -> what is wrong, for each converted checkpoint a
    text names otherwise than the model zoo does."""
    found = {}
    for text in texts:
        for m in CONVERTED.finditer(text.text):
            if m['name'] not in names.values():
                found[f'{text.path}:{text.line_at(m.start())}'] = (
                    f'work_dirs/authors/{m["name"]}: the model zoo names '
                    f'the converted checkpoints {sorted(set(names.values()))}')
        for m in TESTED_WITH.finditer(text.text):
            wanted = names.get(m['config'])
            if wanted is not None and m['name'] != wanted:
                found[f'{text.path}:{text.line_at(m.start())}'] = (
                    f'configs/.../{m["config"]}.py with work_dirs/authors/'
                    f'{m["name"]}: its converted checkpoint is {wanted}')
    return found


def test_a_name_the_model_zoo_does_not_give_is_found():
    """Another name, or a config tested with another model's checkpoint,
    fails with the page, the line and the zoo's names."""
    names = {
        'apa_r50': 'mask-rcnn_apa-r50',
        'mask-rcnn_apa-r50': 'mask-rcnn_apa-r50',
        'cls_r50': 'cls_r50'
    }
    page = SourceText(
        'docs/page.md', 10, 'convert to work_dirs/authors/lvis_r50.pth\n'
        'tools/test.py configs/x/mask-rcnn_apa-r50.py \\\n'
        '    work_dirs/authors/cls_r50.safetensors\n'
        'tools/test.py configs/x/apa_r50.py work_dirs/authors/'
        'mask-rcnn_apa-r50.pth\n')
    assert misnamed([page], names) == {
        'docs/page.md:10':
        'work_dirs/authors/lvis_r50: the model zoo names the converted '
        "checkpoints ['cls_r50', 'mask-rcnn_apa-r50']",
        'docs/page.md:11':
        'configs/.../mask-rcnn_apa-r50.py with work_dirs/authors/cls_r50: '
        'its converted checkpoint is mask-rcnn_apa-r50',
    }


def test_pages_and_code_name_converted_checkpoints_as_the_model_zoo():
    names = zoo_names(REPO)
    assert names['apa_mrcnn_r50'] == names[
        'mask-rcnn_apase-aglu-r50_fpn_gol-normmask_8xb2-rfs-ms-2x_lvis-v1']
    own = Path(__file__).relative_to(REPO).as_posix()  # misnamed on purpose
    texts = [
        t for t in source_texts(REPO, ('work_dirs/authors/', ))
        if t.path != own
    ]
    assert 'docs/user_guides/checkpoints.md' in {t.path for t in texts}
    assert misnamed(texts, names) == {}
