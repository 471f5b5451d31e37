"""Checks the train/test tools run before a Runner touches a work dir."""
import difflib
import os.path as osp
import zipfile
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

from mmengine.config import Config, ConfigDict

GENERATE_HINT = ('Generate the small built-in datasets with '
                 '`python tools/misc/generate_toy_data.py --out-dir data/`, '
                 'or place the real dataset there (README, "Datasets").')


def load_config(path: str, cfg_options: Optional[dict] = None) -> Config:
    """Load a config, naming close matches when the path has a typo.

    Args:
        path (str): Config file path.
        cfg_options (dict, optional): ``--cfg-options`` overrides.

    Raises:
        FileNotFoundError: ``path`` does not exist.
    """
    if not osp.isfile(path):
        folder = Path(path).parent
        candidates = [str(p) for p in folder.glob('*.py')] if folder.is_dir() \
            else []
        close = difflib.get_close_matches(path, candidates, n=3, cutoff=0.6)
        hint = f' Did you mean: {", ".join(close)}?' if close else (
            f' No such folder {str(folder)!r}.' if not folder.is_dir() else '')
        raise FileNotFoundError(f'Config file {path!r} does not exist.{hint}')
    cfg = Config.fromfile(path)
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    return cfg


def _leaf_datasets(dataset_cfg: dict,
                   where: str) -> Iterator[Tuple[str, ConfigDict]]:
    """Yield the datasets that read files, unwrapping dataset wrappers."""
    if 'datasets' in dataset_cfg:
        for i, child in enumerate(dataset_cfg['datasets']):
            yield from _leaf_datasets(child, f'{where}.datasets[{i}]')
    elif 'dataset' in dataset_cfg:
        yield from _leaf_datasets(dataset_cfg['dataset'], f'{where}.dataset')
    else:
        yield where, dataset_cfg


def missing_data_paths(cfg: Config, splits: Tuple[str, ...]) -> List[str]:
    """List the annotation files and image folders ``cfg`` needs but lacks.

    Args:
        cfg (Config): A full runner config.
        splits (tuple[str]): Which of ``'train'``, ``'val'``, ``'test'``.

    Returns:
        list[str]: One line per missing path, naming the config key.
    """
    missing = []
    for split in splits:
        loader = cfg.get(f'{split}_dataloader')
        if not loader:
            continue
        for where, dataset in _leaf_datasets(loader['dataset'],
                                             f'{split}_dataloader.dataset'):
            root = dataset.get('data_root') or ''
            ann_file = dataset.get('ann_file')
            if ann_file:
                path = osp.join(root, ann_file)
                if not osp.exists(path):
                    missing.append(f'{path} ({where}.ann_file)')
            prefix = dataset.get('data_prefix') or {}
            for key, folder in prefix.items():
                path = osp.join(root, folder)
                if folder and not osp.isdir(path):
                    missing.append(f'{path} ({where}.data_prefix.{key})')
        evaluator = cfg.get(f'{split}_evaluator')
        metrics = evaluator if isinstance(evaluator, (list, tuple)) else [
            evaluator
        ]
        for metric in metrics:
            ann_file = metric.get('ann_file') if metric else None
            if ann_file and not osp.exists(ann_file):
                missing.append(f'{ann_file} ({split}_evaluator.ann_file)')
    return missing


def check_data_paths(cfg: Config, splits: Tuple[str, ...]) -> None:
    """Raise one error listing every missing dataset path, and how to fix it.

    Args:
        cfg (Config): A full runner config.
        splits (tuple[str]): Which of ``'train'``, ``'val'``, ``'test'``.

    Raises:
        FileNotFoundError: Some annotation file or image folder is missing.
    """
    missing = missing_data_paths(cfg, splits)
    if missing:
        raise FileNotFoundError('Dataset paths of this config do not exist:\n'
                                + '\n'.join(f'  {m}' for m in missing) +
                                f'\n{GENERATE_HINT}')


def check_checkpoint(path: str) -> None:
    """Make sure a checkpoint file is complete before anything loads it.

    Checkpoints written by ``torch.save`` are zip archives; a truncated
    download loses the central directory and a corrupt one fails the CRC.

    Args:
        path (str): Checkpoint path.

    Raises:
        FileNotFoundError: The file does not exist.
        ValueError: The file is truncated or corrupt.
    """
    if not osp.isfile(path):
        raise FileNotFoundError(f'Checkpoint {path!r} does not exist.')
    if not zipfile.is_zipfile(path):
        raise ValueError(
            f'Checkpoint {path!r} is truncated or not a torch checkpoint '
            '(no zip directory found); nothing was loaded. Use an intact '
            'file, e.g. an earlier epoch_N.pth of the same work dir.')
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError) as error:
        bad = str(error)
    if bad is not None:
        raise ValueError(
            f'Checkpoint {path!r} is corrupt ({bad} fails its checksum); '
            'nothing was loaded. Use an intact file, e.g. an earlier '
            'epoch_N.pth of the same work dir.')


def _pretrained_inits(node, where: str) -> Iterator[Tuple[str, str]]:
    """Yield ``(config key, checkpoint)`` of every ``Pretrained`` init."""
    if isinstance(node, dict):
        init = node.get('init_cfg')
        inits = init if isinstance(init, (list, tuple)) else [init]
        for i, item in enumerate(inits):
            if isinstance(item, dict) and item.get('type') == 'Pretrained' \
                    and item.get('checkpoint'):
                key = f'{where}.init_cfg' + (
                    f'[{i}]' if isinstance(init, (list, tuple)) else '')
                yield f'{key}.checkpoint', str(item['checkpoint'])
        for name, value in node.items():
            if name != 'init_cfg':
                yield from _pretrained_inits(value, f'{where}.{name}')
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            yield from _pretrained_inits(value, f'{where}[{i}]')


def _producing_config(path: str) -> Optional[str]:
    """The config whose default work dir holds ``path``, when one exists.

    ``tools/train.py`` writes to ``work_dirs/<config name>/``; a checkpoint
    under such a folder comes from ``configs/**/<config name>.py``.
    """
    parts = Path(path).parts
    if 'work_dirs' not in parts:
        return None
    index = parts.index('work_dirs')
    if index + 2 >= len(parts):
        return None
    stem = parts[index + 1]
    for root in (Path('.'), Path(__file__).resolve().parents[2]):
        found = sorted((root / 'configs').glob(f'**/{stem}.py'))
        if found:
            return osp.relpath(found[0]) if root == Path('.') else \
                str(found[0])
    return None


def missing_pretrained_paths(cfg: Config) -> List[str]:
    """List the local ``Pretrained`` checkpoints ``cfg.model`` needs but lacks.

    URLs and ``scheme://`` names (``torchvision://``, ``open-mmlab://``,
    ``https://``) are left to mmengine, which downloads them.

    Args:
        cfg (Config): A full runner config.

    Returns:
        list[str]: One line per missing file, naming the config key and,
        when a config of this repository writes the file, how to make it.
    """
    missing = []
    for key, path in _pretrained_inits(cfg.get('model'), 'model'):
        if '://' in path or osp.isfile(path):
            continue
        line = f'{path} ({key})'
        producer = _producing_config(path)
        if producer is not None:
            line += (f'\n    written by training {producer}: '
                     f'tools/dist_train.sh {producer} 8')
        missing.append(line)
    return missing


def check_pretrained_paths(cfg: Config) -> None:
    """Raise one error listing every missing local pretrained checkpoint.

    mmengine's ``Pretrained`` init would otherwise fail only after the model
    is built and the work dir written, with a bare file-not-found error.

    Args:
        cfg (Config): A full runner config.

    Raises:
        FileNotFoundError: Some ``init_cfg=dict(type='Pretrained',
            checkpoint=...)`` names a local file that does not exist.
    """
    missing = missing_pretrained_paths(cfg)
    if missing:
        raise FileNotFoundError(
            'Pretrained checkpoints of this config do not exist:\n' +
            '\n'.join(f'  {m}' for m in missing) +
            '\nTrain the backbone config named above (its final checkpoint '
            'lands at that path), copy or link an existing checkpoint there '
            '(reference-code weights: tools/model_converters/apa_to_mmact.py)'
            ', or train from scratch with --cfg-options '
            'model.backbone.init_cfg=None.')
