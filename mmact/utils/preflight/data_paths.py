"""Check that the dataset files a config reads exist before a run starts.

The check follows the dataset forms of mmdet 3.x and mmpretrain 1.x:
``ann_file`` and ``data_prefix`` (a dict of folders, or one folder as a
string) joined with ``data_root`` as mmengine's ``BaseDataset`` joins them;
``split=`` (mmpretrain), where ``ImageNet`` reads ``data_root/<split>`` and
other datasets at least need ``data_root``; wrappers (``dataset=``) and
``ConcatDataset`` (``datasets=``). Paths on a remote storage backend
(``backend_args``, ``file_client_args`` or a ``scheme://`` path) cannot be
seen by ``os.path`` and are skipped with a note, as is data a dataset
downloads itself (``download=True``). Beside those: the files a dataset
class reads by default (V3Det's class names, ``label_file``), and the
files the model and the evaluators read (``*_file`` keys: the ImageNet-LT
head's and metric's ``train_ann_file``). :func:`fill_hints` says how to
get each missing path: the generator command for a generated set
(``data/toy_<format>``), the publisher's download for a real one.
"""
import importlib.util
import inspect
import os.path as osp
import re
from typing import Any, Iterator, List, Optional, Sequence, Tuple

from mmengine.config import Config
from mmengine.logging import print_log
from mmengine.registry import DATASETS

__all__ = [
    'DATASETS_GUIDE', 'inspect_data_paths', 'missing_data_paths',
    'fill_hints', 'check_data_paths'
]

DATASETS_GUIDE = 'docs/user_guides/datasets.md'
# Where each dataset's files come from, by dataset class (a subclass takes
# its own entry before its parents'): DATASETS_GUIDE's download table.
_DOWNLOADS = {
    'LVISV1Dataset':
    'LVIS v1: lvis_v1_train.json and lvis_v1_val.json from '
    'https://www.lvisdataset.org/dataset, the images COCO 2017\'s '
    '(train2017.zip, val2017.zip from https://cocodataset.org/#download)',
    'V3DetDataset':
    'V3Det: the images, v3det_2023_v1_train.json, v3det_2023_v1_val.json '
    'and category_name_13204_v3det_2023_v1.txt from '
    'https://v3det.openxlab.org.cn/',
    'Objects365V2Dataset':
    'Objects365 v2: the images and zhiyuan_objv2_train.json, '
    'zhiyuan_objv2_val.json from https://www.objects365.org/',
    'CocoDataset':
    'COCO 2017: train2017.zip, val2017.zip and annotations_trainval2017.zip '
    'from https://cocodataset.org/#download',
    'ImageNet':
    'ImageNet-1k: the images from https://image-net.org/download.php, the '
    'meta/train.txt and meta/val.txt lists as mmpretrain\'s ImageNet '
    'documentation describes them; ImageNet-LT: its lists '
    'ImageNet_LT_{train,val,test}.txt from '
    'https://github.com/zhmiao/OpenLongTailRecognition-OLTR',
}
# <out-dir>/toy_<format>/: what tools/misc/generate_toy_data.py writes
_GENERATED = re.compile(r'^(?P<out>.*?)/?\btoy_(?P<format>[a-z0-9]+)(/|$)')

# mmpretrain datasets that read the folder named by ``split`` when no
# ``data_prefix`` is given.
_SPLIT_FOLDER_DATASETS = ('ImageNet', 'ImageNet21k')
_SPLITS = ('train', 'val', 'test')


def _remote_backend(args: Any) -> Optional[str]:
    """The storage backend ``backend_args`` selects, None when local."""
    if not isinstance(args, dict):
        return None
    backend = args.get('backend')
    # 'disk' is the local backend of mmcv 1.x's FileClient.
    return None if backend in (None, 'local', 'disk') else str(backend)


def _is_uri(path: str) -> bool:
    return '://' in path


def _leaf_datasets(dataset_cfg: Any, where: str) -> Iterator[Tuple[str, dict]]:
    """Yield the datasets that read files, unwrapping dataset wrappers."""
    if not isinstance(dataset_cfg, dict):
        return
    if isinstance(dataset_cfg.get('datasets'), (list, tuple)):
        for i, child in enumerate(dataset_cfg['datasets']):
            yield from _leaf_datasets(child, f'{where}.datasets[{i}]')
    elif isinstance(dataset_cfg.get('dataset'), dict):
        yield from _leaf_datasets(dataset_cfg['dataset'], f'{where}.dataset')
    else:
        yield where, dataset_cfg


def _dataset_class(dataset: dict, scope: Optional[str]) -> Optional[type]:
    """The registered class of ``dataset``, None when it cannot be found."""
    kind = dataset.get('type')
    if isinstance(kind, type):
        return kind
    if not isinstance(kind, str):
        return None
    package = kind.split('.')[0] if '.' in kind else scope
    if package and importlib.util.find_spec(package) is None:
        return None  # the scope's package is not installed
    with DATASETS.switch_scope_and_registry(scope) as registry:
        return registry.get(kind)


def _default(cls: Optional[type], name: str) -> Any:
    """Default of ``cls.__init__``'s argument ``name`` (None if absent)."""
    if cls is None:
        return None
    try:
        parameter = inspect.signature(cls.__init__).parameters.get(name)
    except (TypeError, ValueError):
        return None
    if parameter is None or parameter.default is inspect.Parameter.empty:
        return None
    return parameter.default


def _pipeline_backend(dataset: dict) -> Optional[str]:
    """The remote backend the dataset's transforms load images from."""
    pipeline = dataset.get('pipeline')
    for transform in pipeline if isinstance(pipeline, (list, tuple)) else []:
        if isinstance(transform, dict):
            backend = _remote_backend(
                transform.get('backend_args')
                or transform.get('file_client_args'))
            if backend:
                return backend
    return None


def _inspect_dataset(dataset: dict, where: str,
                     scope: Optional[str]) -> Tuple[List[str], List[str]]:
    """Missing paths and notes of one leaf dataset config."""
    backend = _remote_backend(
        dataset.get('backend_args') or dataset.get('file_client_args'))
    root = dataset.get('data_root') or ''
    if not isinstance(root, str):
        return [], []
    if backend or _is_uri(root):
        return [], [
            f'{where}: data on the {backend or root} backend is not '
            'checked (os.path cannot see it)'
        ]

    def join(path: str) -> str:
        return path if osp.isabs(path) or _is_uri(path) else osp.join(
            root, path)

    missing, notes = [], []
    ann_files = dataset.get('ann_file')
    ann_files = ann_files if isinstance(ann_files,
                                        (list, tuple)) else [ann_files]
    checked = False
    for ann_file in ann_files:
        if isinstance(ann_file, str) and ann_file:
            checked = True
            path = join(ann_file)
            if _is_uri(path):
                notes.append(f'{path} ({where}.ann_file): remote, not checked')
            elif not osp.exists(path):
                missing.append(f'{path} ({where}.ann_file)')

    cls = _dataset_class(dataset, scope)
    prefix = dataset.get('data_prefix')
    split = dataset.get('split')
    if isinstance(prefix, str) and prefix:
        folders = [(f'{where}.data_prefix', prefix)]
    elif isinstance(prefix, dict) and any(prefix.values()):
        folders = [(f'{where}.data_prefix.{key}', folder)
                   for key, folder in prefix.items()]
    elif split and isinstance(split, str) and cls is not None and any(
            c.__name__ in _SPLIT_FOLDER_DATASETS for c in cls.__mro__):
        folders = [(f'{where}.split', split)]  # reads data_root/<split>
    else:
        folders = []
    image_backend = _pipeline_backend(dataset)
    for name, folder in folders:
        if not isinstance(folder, str) or not folder:
            continue
        checked = True
        path = join(folder)
        if image_backend or _is_uri(path):
            notes.append(f'{path} ({name}): images on the '
                         f'{image_backend or "remote"} backend, not checked')
        elif not osp.exists(path):
            missing.append(f'{path} ({name})')
    # Datasets that find their files from data_root alone (split=, folder
    # scanning) need at least that folder.
    if not checked and root and not osp.isdir(root):
        missing.append(f'{root} ({where}.data_root)')

    # read by the dataset class from data_root (V3Det's class names)
    label_file = dataset.get('label_file', _default(cls, 'label_file'))
    if isinstance(label_file, str) and label_file:
        path = join(label_file)
        if not osp.exists(path):
            missing.append(f'{path} ({where}.label_file)')

    download = dataset.get('download', _default(cls, 'download'))
    if missing and download is True:
        notes += [
            f'{m}: downloaded by the dataset (download=True)' for m in missing
        ]
        missing = []
    return missing, notes


def _metrics(evaluator: Any) -> Iterator[dict]:
    """Metric configs of an evaluator config (dict, list or Evaluator)."""
    if isinstance(evaluator, (list, tuple)):
        for item in evaluator:
            yield from _metrics(item)
    elif isinstance(evaluator, dict):
        if 'metrics' in evaluator:
            yield from _metrics(evaluator['metrics'])
        else:
            yield evaluator


def inspect_data_paths(cfg: Config,
                       splits: Sequence[str]) -> Tuple[List[str], List[str]]:
    """List the dataset paths ``cfg`` needs but lacks, and what was skipped.

    Args:
        cfg (Config): A full runner config.
        splits (Sequence[str]): Which of ``'train'``, ``'val'``, ``'test'``.

    Returns:
        tuple[list[str], list[str]]: One line per missing path, naming the
        config key; one note per path that was not checked (remote storage,
        data the dataset downloads itself).

    Raises:
        ValueError: ``splits`` names something else.
    """
    unknown = set(splits) - set(_SPLITS)
    if unknown:
        raise ValueError(f'splits must be among {_SPLITS}, got '
                         f'{sorted(unknown)}')
    scope = cfg.get('default_scope')
    missing, notes = [], []
    for split in splits:
        loader = cfg.get(f'{split}_dataloader')
        if isinstance(loader, dict):
            for where, dataset in _leaf_datasets(
                    loader.get('dataset'), f'{split}_dataloader.dataset'):
                more, more_notes = _inspect_dataset(dataset, where, scope)
                missing += more
                notes += more_notes
        for metric in _metrics(cfg.get(f'{split}_evaluator')):
            backend = _remote_backend(
                metric.get('backend_args') or metric.get('file_client_args'))
            for key, path in _file_keys(metric, f'{split}_evaluator'):
                if backend or _is_uri(path):
                    notes.append(f'{path} ({key}): remote, not checked')
                elif not osp.exists(path):
                    missing.append(f'{path} ({key})')
    # the model reads these whatever the split (ImageNet-LT's class prior)
    for key, path in _file_keys(cfg.get('model'), 'model'):
        if not _is_uri(path) and not osp.exists(path):
            missing.append(f'{path} ({key})')
    return missing, notes


def _file_keys(node: Any, where: str) -> Iterator[Tuple[str, str]]:
    """``(config key, path)`` of every non-empty ``*_file`` string below
    ``node`` (an evaluator's ``ann_file``, a head's ``train_ann_file``)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(key, str) and key.endswith('_file') and isinstance(
                    value, str) and value:
                yield f'{where}.{key}', value
            else:
                yield from _file_keys(value, f'{where}.{key}')
    elif isinstance(node, (list, tuple)):
        for value in node:
            yield from _file_keys(value, where)


def _dataset_downloads(cfg: Config) -> List[str]:
    """The downloads of the config's datasets, one per dataset class."""
    scope = cfg.get('default_scope')
    found: List[str] = []
    for split in _SPLITS:
        loader = cfg.get(f'{split}_dataloader')
        for _, dataset in _leaf_datasets(
                loader.get('dataset') if isinstance(loader, dict) else None,
                ''):
            cls = _dataset_class(dataset, scope)
            names = [c.__name__ for c in cls.__mro__] if cls else []
            source = next((_DOWNLOADS[n] for n in names if n in _DOWNLOADS),
                          None)
            if source is not None and source not in found:
                found.append(source)
    return found


def fill_hints(cfg: Config, missing: Sequence[str]) -> List[str]:
    """How to get the paths :func:`inspect_data_paths` lists as missing.

    Args:
        cfg (Config): The config they were listed for.
        missing (Sequence[str]): Its lines (``<path> (<config key>)``).

    Returns:
        list[str]: The generator command of each generated set
        (``<out-dir>/toy_<format>``), the publisher's download of each real
        dataset of the config.
    """
    from mmact.testing.toy_data.formats import TOY_FORMATS
    hints: List[str] = []
    real = False
    for line in missing:
        match = _GENERATED.match(line.rsplit(' (', 1)[0])
        if match and match['format'] in TOY_FORMATS:
            hint = ('python tools/misc/generate_toy_data.py '
                    f'{match["format"]} --out-dir {match["out"] or "."}/')
            if hint not in hints:
                hints.append(hint)
        else:
            real = True
    if real:
        hints += _dataset_downloads(cfg) or [
            'place the dataset where the config names it'
        ]
    return hints


def missing_data_paths(cfg: Config, splits: Sequence[str]) -> List[str]:
    """List the annotation files and image folders ``cfg`` needs but lacks.

    Args:
        cfg (Config): A full runner config.
        splits (Sequence[str]): Which of ``'train'``, ``'val'``, ``'test'``.

    Returns:
        list[str]: One line per missing path, naming the config key.
    """
    return inspect_data_paths(cfg, splits)[0]


def check_data_paths(cfg: Config, splits: Sequence[str]) -> None:
    """Raise one error listing every missing dataset path, and how to fix it.

    Paths that cannot be checked are logged as notes.

    Args:
        cfg (Config): A full runner config.
        splits (Sequence[str]): Which of ``'train'``, ``'val'``, ``'test'``.

    Raises:
        FileNotFoundError: Some annotation file or image folder is missing.
    """
    missing, notes = inspect_data_paths(cfg, splits)
    for note in notes:
        print_log(f'Data check: {note}', logger='current')
    if missing:
        raise FileNotFoundError(
            'Dataset paths of this config do not exist:\n' +
            '\n'.join(f'  {m}' for m in missing) + '\nTo get them: ' +
            '; '.join(fill_hints(cfg, missing)) +
            f'. Each dataset\'s source and layout: {DATASETS_GUIDE}')
